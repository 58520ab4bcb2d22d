#!/usr/bin/env bash
# vcurve-registry: Debian's docker-registry (the CNCF Distribution registry, v2 API) in a
# container of the base image, run by deploy/images/build-services as `bash /mnt/setup.sh` (this
# folder bind-mounted read-only), then committed with the lines of image.conf. Part of the tag.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker-registry >/dev/null
install -D -m 0644 /mnt/config.yml /etc/docker/registry/config.yml
mkdir -p /var/lib/docker-registry
docker-registry --version
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/*.log /usr/share/doc/* /usr/share/man/*
