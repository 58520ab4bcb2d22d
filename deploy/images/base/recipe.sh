# The base image's recipe, sourced by deploy/images/build.
#
# Everything that decides what ends up in the base image lives in this file, and nothing else:
# the base tag is vcurve-base:<first 12 hex of SHA-256 of this file>, so editing anything here
# (the suite, the packages, the debootstrap call, the cleanup, the image config) gives a new tag and
# a rebuild, and nothing else does. Bump BASE_RECIPE_VERSION to force a rebuild with no other change
# (e.g. to pick up the mirror's security updates).
#
# The mirror is not part of the recipe: it is the machine's (deploy/images/build reads it from the
# apt sources), so two machines with different mirrors may hold different bytes under one tag.

BASE_RECIPE_VERSION=1
BASE_SUITE=bookworm
# Only what a task needs to run Python code, apply and diff patches, and be inspected by an agent.
# debootstrap adds their Depends (not their Recommends). bash and coreutils come with minbase.
BASE_PACKAGES=(python3 git patch procps)

# build_base_image TAG MIRROR WORKDIR LOG: debootstrap into WORKDIR/rootfs, trim it, import it as
# TAG. The caller owns WORKDIR (a fresh empty folder) and removes it afterwards; LOG receives
# debootstrap's output.
build_base_image() {
    local tag=$1 mirror=$2 work=$3 log=$4
    local rootfs="$work/rootfs"
    local includes
    includes=$(IFS=,; echo "${BASE_PACKAGES[*]}")
    mkdir -p "$rootfs"

    say "debootstrap ${BASE_SUITE} (minbase + ${includes}) from ${mirror} — about a minute; log: ${log}"
    if ! debootstrap --variant=minbase --components=main --include="$includes" \
        "$BASE_SUITE" "$rootfs" "$mirror" >"$log" 2>&1; then
        tail -n 20 "$log" >&2 || true
        local detail="${log%.log}.debootstrap.log"
        if cp "$rootfs/debootstrap/debootstrap.log" "$detail" 2>/dev/null; then
            die "debootstrap failed (the last lines are above; its output is in ${log}, its own detailed log in ${detail})"
        fi
        die "debootstrap failed (the last lines are above; its output is in ${log})"
    fi

    say "trimming the root filesystem (apt caches, docs, man pages)"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
        "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/*
    # No machine id, so every container of the image starts with the same (empty) one.
    : >"$rootfs/etc/machine-id"

    say "importing the root filesystem into docker as ${tag}"
    tar --numeric-owner -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'WORKDIR /' \
        --change 'CMD ["bash"]' \
        --change "LABEL org.opencontainers.image.title=vcurve-base org.opencontainers.image.description=\"Debian ${BASE_SUITE} minbase with ${includes}, for vcurve task images\"" \
        --message "vcurve base image, recipe version ${BASE_RECIPE_VERSION}" \
        - "$tag" >/dev/null
}
