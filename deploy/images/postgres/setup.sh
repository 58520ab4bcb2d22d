#!/usr/bin/env bash
# vcurve-postgres: Debian's PostgreSQL 15 in a container of the base image, run by
# deploy/images/build-services as `bash /mnt/setup.sh` (this folder bind-mounted read-only), then
# committed with the lines of image.conf. This file is part of the image's tag.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# No cluster at install time (postgresql-common would make 15/main): the entrypoint makes one in
# the data volume on the first start.
mkdir -p /etc/postgresql-common/createcluster.d
echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/vcurve.conf
# postgresql-15 without its recommends (no sysstat, no locales beyond C.UTF-8).
apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null
install -m 0755 /mnt/entrypoint /usr/local/bin/vcurve-postgres
/usr/lib/postgresql/15/bin/postgres --version
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/*.log /usr/share/doc/* \
    /usr/share/man/*
