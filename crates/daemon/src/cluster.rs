//! `xlat check --cluster`: the configurations of the nodes of a scale-out cluster
//! (docs/SCALE-OUT.md) checked together. Each node must own distinct outside addresses --
//! the pool prefix it announces routes the return traffic to it, so two nodes with a
//! shared pool address would each get the other's replies -- and a node's check names the
//! other node whose pool it overlaps.

use crate::config::Config;
use xlat_engine::Prefix4;

/// The outside addresses a node owns, each with the key it comes from: `[nat44] pool` and
/// static outside addresses, `[nat64] pool4`.
pub fn outside_prefixes(cfg: &Config) -> Vec<(String, Prefix4)> {
    let mut out = Vec::new();
    if let Some(n) = &cfg.nat44 {
        out.extend(n.pool.iter().map(|p| ("nat44.pool".to_string(), *p)));
        out.extend(
            n.statics.iter().filter_map(|s| {
                Prefix4::new(s.outside, 32).map(|p| ("nat44.static".to_string(), p))
            }),
        );
    }
    if let Some(n) = &cfg.nat64 {
        out.extend(n.pool4.iter().map(|p| ("nat64.pool4".to_string(), *p)));
    }
    out
}

/// Every overlap between `node`'s outside prefixes and another node's: one message each,
/// naming both files, both keys and both prefixes.
pub fn overlaps(node: &Config, others: &[Config]) -> Vec<String> {
    let mine = outside_prefixes(node);
    let mut out = Vec::new();
    for other in others {
        for (ka, a) in &mine {
            for (kb, b) in outside_prefixes(other) {
                if a.overlaps(&b) {
                    out.push(format!(
                        "{}: {ka}: {a} overlaps {kb} {b} of the cluster node {}; each node must own distinct outside addresses (the pool prefix it announces routes return traffic to it): give one of them another prefix",
                        node.file, other.file
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn node(file: &str, pool: &str, pool4: Option<&str>) -> Config {
        let mut text = format!("[nat44]\ninside = [\"198.18.0.0/24\"]\npool = [\"{pool}\"]\n");
        if let Some(p) = pool4 {
            text += &format!("[nat64]\nprefix = \"64:ff9b::/96\"\npool4 = [\"{p}\"]\n");
        }
        Config::parse(file, &text).unwrap()
    }

    #[test]
    fn overlapping_pools_are_named_with_both_nodes() {
        let a = node("a.toml", "198.19.16.0/28", None);
        let b = node("b.toml", "198.19.17.0/28", Some("198.19.30.0/28"));
        let c = node("c.toml", "198.19.16.8/29", None);
        assert!(overlaps(&a, std::slice::from_ref(&b)).is_empty());
        let e = overlaps(&c, &[a.clone(), b.clone()]);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].contains("c.toml") && e[0].contains("a.toml") && e[0].contains("198.19.16.8/29"),
            "{}",
            e[0]
        );
        // NAT64's pool4 against another node's NAT44 pool.
        let d = node("d.toml", "198.19.30.4/30", None);
        let e = overlaps(&d, &[b]);
        assert!(e.len() == 1 && e[0].contains("nat64.pool4"), "{e:?}");
    }
}
