#!/usr/bin/env bash
# make docker-test: builds the viewer and engine images and runs them (health, every page, an
# upload, the demo, /data and /cache writable by the image's user and by --user $(id -u), the
# parse cache reused by a second container, an unwritable /data's message).
# Skips, saying why, when no Docker daemon answers. DOCKER_BUILD_ARGS passes build arguments
# (a base image or package index of your own); DOCKER_RUN_NETWORK the network to run on.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! out=$(docker info --format '{{.ServerVersion}}' 2>&1); then
    echo "make docker-test: skipped: no Docker daemon answers ($(echo "$out" | tail -1))"
    exit 0
fi
TAG=podscope-test
TOKEN=docker-test-token
NET=${DOCKER_RUN_NETWORK:-bridge}
work=$(mktemp -d)
containers=()
volumes=(podscope-test-data-$$ podscope-test-cache-$$)
cleanup() {
    for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
    for v in "${volumes[@]}"; do docker volume rm -f "$v" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT

build() { docker build ${DOCKER_BUILD_ARGS:-} "$@" .; }
t0=$(date +%s); build -q -t $TAG:viewer >/dev/null; echo "viewer image built in $(( $(date +%s) - t0 )) s"
t0=$(date +%s); build -q --build-arg EXTRAS=all -t $TAG:engine >/dev/null; echo "engine image built in $(( $(date +%s) - t0 )) s"

wait_healthy() {  # the container's own health check, as Docker reports it
    for _ in $(seq 300); do
        state=$(docker inspect -f '{{.State.Health.Status}}' "$1" 2>/dev/null || echo gone)
        [ "$state" = healthy ] && return 0
        [ "$state" = gone ] && break
        sleep 1
    done
    docker logs "$1" | tail -20; echo "container $1 never became healthy ($state)"; return 1
}
# Starts a container and sets $c; called in this shell, never inside $(…) (a subshell's
# containers+=… is lost, and a failing step then left its containers running).
run() { c=$(docker run -d --network "$NET" --health-interval 1s -e PODSCOPE_DASHBOARD_TOKEN=$TOKEN "$@"); containers+=("$c"); }

# Without a login the container refuses to serve, and says how.
if docker run --rm --network "$NET" $TAG:viewer > "$work/refused.log" 2>&1; then
    echo "serve started without a login"; exit 1
fi
grep -q PODSCOPE_DASHBOARD_TOKEN "$work/refused.log"

# The image's user with an anonymous volume, then --user $(id -u) with a bind mount.
run $TAG:viewer; wait_healthy "$c"
docker exec -i "$c" python - $TOKEN < docker/smoke.py
mkdir -p "$work/data"
run --user "$(id -u):$(id -g)" -v "$work/data:/data" $TAG:viewer; wait_healthy "$c"
docker exec -i "$c" python - $TOKEN < docker/smoke.py
ls "$work"/data/plugins/profile/*/phone.systrace >/dev/null
t0=$(date +%s); docker stop "$c" >/dev/null; echo "docker stop took $(( $(date +%s) - t0 )) s"

# The parse cache in a named volume: the first container writes it (and never says it could
# not), a second one on the same volumes reads it.
run -v "${volumes[0]}:/data" -v "${volumes[1]}:/cache" $TAG:viewer; wait_healthy "$c"
docker exec -i "$c" python - $TOKEN < docker/smoke.py
docker exec -i "$c" python - < docker/cache_hit.py
if docker logs "$c" 2>&1 | grep -q "parse cache not written"; then
    docker logs "$c" 2>&1 | grep "parse cache" | head -3; echo "the cache was not written"; exit 1
fi
docker rm -f "$c" >/dev/null
run -v "${volumes[0]}:/data" -v "${volumes[1]}:/cache" $TAG:viewer; wait_healthy "$c"
docker exec -i "$c" python - < docker/cache_hit.py

# A bind mount of /data the container's user cannot write: the upload says what to change.
mkdir -p "$work/readonly" && chmod 755 "$work/readonly"
run -v "$work/readonly:/data" $TAG:viewer; wait_healthy "$c"
if docker exec -i "$c" python - $TOKEN < docker/smoke.py > "$work/readonly.log" 2>&1; then
    echo "an upload to a folder uid 10001 cannot write succeeded"; exit 1
fi
grep -q "writable by uid 10001" "$work/readonly.log" || { tail -5 "$work/readonly.log"; exit 1; }

# The viewer's demo points to the engine image; the engine image's demo serves.
if docker run --rm --network "$NET" $TAG:viewer podscope demo > "$work/demo.log" 2>&1; then
    echo "the viewer image ran the demo without TensorFlow"; exit 1
fi
grep -q "engine image" "$work/demo.log"
run $TAG:engine podscope demo --duration-ms 1000; wait_healthy "$c"
docker exec -i "$c" python - $TOKEN < docker/smoke.py
echo "make docker-test: passed"
