//! The networks a worker's operator lets agent containers have (`vcurve worker --network`), and
//! the container network of a study's `runner.network` on this worker.
//!
//! `none` is always offered. `bridge` puts the container on the Engine's default bridge: it
//! reaches whatever the worker's host reaches, as mini-swe-agent's own `DockerEnvironment` does.
//! `proxy` puts it on a Docker network the operator made *internal* (no route out), on which the
//! deployment runs a package index or caching proxy, and gives every command the variables that
//! point the tools at it (`PIP_INDEX_URL`, `HTTP_PROXY`, …): the agent can install packages, from
//! that service alone, and a recorded install replays as long as the index serves the same
//! files. The worker checks at its start that the network exists and is internal.

use std::collections::BTreeMap;

use vcurve_record::runner::Network;

use crate::sandbox::container::ContainerNetwork;

/// What a worker offers beyond `none`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkOffer {
    /// `--network bridge`.
    pub bridge: bool,
    /// `--network proxy=NETWORK`, with its `--proxy-env` variables.
    pub proxy: Option<ProxyNetwork>,
}

/// The operator's package proxy network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyNetwork {
    /// The Docker network's name.
    pub network: String,
    /// What every command in a container on it gets (`PIP_INDEX_URL=http://pypi-cache:3141/…`).
    pub env: BTreeMap<String, String>,
}

impl NetworkOffer {
    /// The offer of the `--network` flags (`bridge`, `none`, `proxy=NETWORK`) and the
    /// `--proxy-env NAME=VALUE` flags; the error names the flag and what is wrong.
    pub fn from_flags(networks: &[String], proxy_env: &[String]) -> Result<NetworkOffer, String> {
        let mut offer = NetworkOffer::default();
        for flag in networks {
            match flag.split_once('=') {
                None if flag == "none" => {}
                None if flag == "bridge" => offer.bridge = true,
                None if flag == "proxy" => {
                    return Err("--network proxy: name the deployment's package proxy network, \
                                --network proxy=DOCKER_NETWORK"
                        .into());
                }
                Some(("proxy", name)) => {
                    check_network_name(name).map_err(|e| format!("--network {flag}: {e}"))?;
                    if offer.proxy.as_ref().is_some_and(|p| p.network != name) {
                        return Err(format!("--network {flag}: a worker offers one proxy network"));
                    }
                    offer.proxy = Some(ProxyNetwork { network: name.to_owned(), env: BTreeMap::new() });
                }
                _ => {
                    return Err(format!(
                        "--network {flag}: give none, bridge or proxy=DOCKER_NETWORK (the network a study \
                         names is one of none, bridge, proxy)"
                    ));
                }
            }
        }
        for flag in proxy_env {
            let Some(proxy) = offer.proxy.as_mut() else {
                return Err(format!("--proxy-env {flag}: needs --network proxy=DOCKER_NETWORK"));
            };
            let (name, value) = flag.split_once('=').ok_or_else(|| format!("--proxy-env {flag}: give NAME=VALUE"))?;
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(format!("--proxy-env {flag}: {name:?} is not a variable name"));
            }
            proxy.env.insert(name.to_owned(), value.to_owned());
        }
        Ok(offer)
    }

    /// The networks offered beyond `none`, as the worker registers them.
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        if self.bridge {
            names.push(Network::Bridge.as_str().to_owned());
        }
        if self.proxy.is_some() {
            names.push(Network::Proxy.as_str().to_owned());
        }
        names
    }

    /// The container network of a study's `network` on this worker, and the variables every
    /// command gets with it; an error when the worker does not offer it (the coordinator hands
    /// such a study's jobs only to workers that do, so this is a job that should not be here).
    pub fn container_network(&self, network: Network) -> Result<(ContainerNetwork, BTreeMap<String, String>), String> {
        match (network, &self.proxy) {
            (Network::None, _) => Ok((ContainerNetwork::None, BTreeMap::new())),
            (Network::Bridge, _) if self.bridge => Ok((ContainerNetwork::Bridge, BTreeMap::new())),
            (Network::Proxy, Some(proxy)) => Ok((ContainerNetwork::Named(proxy.network.clone()), proxy.env.clone())),
            (other, _) => Err(format!(
                "this worker does not offer the network {other} to agent containers (vcurve worker --network)"
            )),
        }
    }
}

/// Whether `name` can name a Docker network: 1 to 128 ASCII letters, digits, `.`, `_` or `-`,
/// starting with a letter or digit, and not one of the Engine's own modes.
pub fn check_network_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        return Err(format!("{name:?} is not a Docker network name"));
    }
    // The Engine's `container:NAME` mode has a colon, which no network name has (refused above):
    // a name that only starts with "container" is a network like any other.
    if matches!(name, "none" | "bridge" | "host" | "default") {
        return Err(format!("{name:?} is the Engine's own mode, not a network the deployment made"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_flags_make_an_offer_and_bad_ones_name_themselves() {
        let offer = NetworkOffer::from_flags(
            &flags(&["bridge", "proxy=vcurve-pkgs"]),
            &flags(&["PIP_INDEX_URL=http://index:8080/simple/", "PIP_TRUSTED_HOST=index"]),
        )
        .unwrap();
        assert_eq!(offer.names(), ["bridge", "proxy"]);
        let (network, env) = offer.container_network(Network::Proxy).unwrap();
        assert_eq!(network, ContainerNetwork::Named("vcurve-pkgs".into()));
        assert_eq!(env["PIP_INDEX_URL"], "http://index:8080/simple/");
        assert_eq!(offer.container_network(Network::Bridge).unwrap(), (ContainerNetwork::Bridge, BTreeMap::new()));
        assert_eq!(offer.container_network(Network::None).unwrap().0, ContainerNetwork::None);

        let closed = NetworkOffer::from_flags(&[], &[]).unwrap();
        assert!(closed.names().is_empty());
        let e = closed.container_network(Network::Bridge).unwrap_err();
        assert!(e.contains("does not offer the network bridge"), "{e}");

        for (networks, env, named) in [
            (&["host"][..], &[][..], "--network host"),
            (&["proxy"], &[], "--network proxy=DOCKER_NETWORK"),
            (&["proxy=host"], &[], "the Engine's own mode"),
            (&["proxy=a b"], &[], "not a Docker network name"),
            (&["proxy=a", "proxy=b"], &[], "one proxy network"),
            (&["bridge"], &["A=1"], "needs --network proxy"),
            (&["proxy=p"], &["1A=1"], "not a variable name"),
            (&["proxy=p"], &["NOVALUE"], "NAME=VALUE"),
        ] {
            let e = NetworkOffer::from_flags(&flags(networks), &flags(env)).unwrap_err();
            assert!(e.contains(named), "{networks:?} {env:?}: {e}");
        }
        // A name that starts like the Engine's `container:` mode is a network name all the same.
        assert_eq!(check_network_name("containers-proxy"), Ok(()));
        assert!(check_network_name("container:abc").unwrap_err().contains("not a Docker network name"));
    }
}
