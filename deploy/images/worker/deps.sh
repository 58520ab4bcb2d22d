#!/usr/bin/env bash
# The worker's dependencies, run by deploy/images/build-services as `bash /mnt/deps.sh` inside a
# container of the base image, which it then commits as vcurve-worker-deps:<hash>. /mnt/wheels
# is bind-mounted read-only: the wheels the host downloaded from PyPI (pip download), one folder per
# environment. Debian's packages come from the base image's apt sources (the container reaches the
# mirror over the default bridge network). This file is part of the deps tag.
set -euo pipefail
MSA_VERSION=$1
SWEBENCH_VERSION=$2

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# python3-venv for the two environments; the docker CLI from Debian's docker.io package (only
# /usr/bin/docker: the worker talks to the host's engine through its socket, it runs no daemon).
apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
cd /tmp
apt-get download -qq docker.io 2>/dev/null
dpkg-deb --fsys-tarfile docker.io_*.deb | tar -x -C / ./usr/bin/docker
rm -f docker.io_*.deb
docker --version

# Each environment at the absolute path the worker image uses (a venv hard-codes its path),
# installed from the mounted wheels only.
mkvenv() {
    local dir=$1 wheels=$2 requirement=$3
    python3 -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --no-cache-dir --no-index --disable-pip-version-check \
        --find-links "$wheels" "$requirement"
}
mkvenv /opt/vcurve/.venv/mini-swe-agent /mnt/wheels/mini-swe-agent "mini-swe-agent==$MSA_VERSION"
mkvenv /opt/vcurve/.venv/swebench /mnt/wheels/swebench "swebench==$SWEBENCH_VERSION"
/opt/vcurve/.venv/mini-swe-agent/bin/python -c 'import importlib.metadata as m, minisweagent; print("mini-swe-agent", m.version("mini-swe-agent"))'
/opt/vcurve/.venv/swebench/bin/python -c 'import importlib.metadata as m, docker, swebench.harness.run_evaluation; print("swebench", m.version("swebench"))'

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/*.log /usr/share/doc/* \
    /usr/share/man/* /root/.cache
