# PodScope dashboard image.
#   docker build -t podscope .                                  # viewer: parse + serve
#   docker build -t podscope:engine --build-arg EXTRAS=engine . # + TensorFlow for `podscope demo`
#   docker run -p 8050:8050 -v $PWD/runs:/data podscope
ARG PYTHON=3.11

# Build stage: compiles the C extensions (XPlane decoder, ftrace reader) into a wheel.
FROM python:${PYTHON}-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY trace_parsers trace_parsers
COPY analyzers analyzers
COPY collectors collectors
COPY reference_engine reference_engine
COPY app app
COPY assets assets
RUN pip wheel --no-deps --wheel-dir /wheels .

# Runtime stage: no compiler, non-root, non-editable install.
FROM python:${PYTHON}-slim
ARG EXTRAS=""
RUN useradd --create-home --uid 10001 podscope
COPY --from=build /wheels /wheels
RUN whl="$(ls /wheels/podscope-*.whl)" \
    && pip install --no-cache-dir "${whl}${EXTRAS:+[$EXTRAS]}" \
    && rm -rf /wheels
USER podscope
WORKDIR /home/podscope
ENV PODSCOPE_CACHE_DIR=/home/podscope/.cache/podscope TF_CPP_MIN_LOG_LEVEL=2
EXPOSE 8050
VOLUME /data
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8050/healthz', timeout=4).status != 200)"
CMD ["podscope", "serve", "--host", "0.0.0.0", "--port", "8050", "--logdir", "/data"]
