# PodScope dashboard image (README "Docker"). Works with the classic builder and BuildKit.
#   docker build -t podscope .                                # viewer: parse + serve
#   docker build -t podscope:engine --build-arg EXTRAS=all .  # + TensorFlow for `podscope demo`
#   docker run -p 127.0.0.1:8050:8050 -e PODSCOPE_DASHBOARD_TOKEN=... -v $PWD/runs:/data podscope
# Corporate mirrors and proxies: --build-arg BASE_IMAGE=..., PIP_INDEX_URL, PIP_EXTRA_INDEX_URL,
# PIP_TRUSTED_HOST; extra CA certificates (*.crt) in docker/certs/ are trusted while building.
ARG BASE_IMAGE=python:3.11-slim

# Build stage: compiles the C extensions (XPlane decoder, ftrace reader) into a wheel.
FROM ${BASE_IMAGE} AS build
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY docker/certs/ /usr/local/share/ca-certificates/podscope/
COPY docker/trust-certs.sh /usr/local/bin/
RUN trust-certs.sh
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY podscope podscope
COPY trace_parsers trace_parsers
COPY analyzers analyzers
COPY collectors collectors
COPY reference_engine reference_engine
COPY app app
COPY assets assets
RUN pip wheel --no-deps --wheel-dir /wheels .

# Runtime stage: no compiler, non-root, non-editable install.
FROM ${BASE_IMAGE}
ARG EXTRAS=dashboard
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_TRUSTED_HOST
COPY docker/certs/ /usr/local/share/ca-certificates/podscope/
COPY docker/trust-certs.sh /usr/local/bin/
RUN trust-certs.sh
# /data (traces) and /cache (parsed frames) are writable by the image's user (10001) and by
# any `--user`, in a named or anonymous volume alike (sticky, like /tmp); the cache keeps each
# user's entries in a private folder of its own there (/cache/uid-<uid>).
RUN useradd --create-home --uid 10001 podscope \
    && mkdir -p /data /cache && chmod 1777 /data /cache
# Dependencies in a layer of their own: a code change reinstalls only PodScope's wheel.
COPY pyproject.toml docker/requirements.py /tmp/deps/
RUN python /tmp/deps/requirements.py /tmp/deps/pyproject.toml ${EXTRAS} > /tmp/deps/req.txt \
    && pip install --no-cache-dir -r /tmp/deps/req.txt && rm -rf /tmp/deps
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/podscope-*.whl && rm -rf /wheels
USER podscope
WORKDIR /home/podscope
# The container's interface is 0.0.0.0 so that `-p` reaches it; serve then asks for a login
# (PODSCOPE_DASHBOARD_TOKEN, PODSCOPE_USERS_FILE or PODSCOPE_TRUST_PROXY_HEADER with
# PODSCOPE_TRUSTED_PROXIES) and refuses to start without one. Names other than localhost and
# 127.0.0.1 that browsers use to reach it go in PODSCOPE_ALLOWED_HOSTS.
ENV PODSCOPE_LOGDIR=/data PODSCOPE_CACHE_DIR=/cache PODSCOPE_HOST=0.0.0.0 PODSCOPE_PORT=8050 \
    TF_CPP_MIN_LOG_LEVEL=2
EXPOSE 8050
VOLUME ["/data", "/cache"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8050/healthz', timeout=4).status != 200)"
CMD ["podscope", "serve"]
