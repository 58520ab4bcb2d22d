//! Prometheus endpoints as the tests read them: [`get`] one path over plain HTTP/1.1, and
//! [`parse`] a scrape with a strict parser of the text format 0.0.4.

use std::collections::{BTreeMap, HashMap};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over HTTP/1.1 with an optional bearer token: (status, content type, body).
pub async fn get(addr: &str, path: &str, bearer: Option<&str>) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_string))
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// A scrape parsed strictly: every line is `# HELP`, `# TYPE` or a sample of a declared family,
/// names and labels well formed, no sample twice. Samples by `name{k="v",…}` (labels sorted).
#[derive(Debug)]
pub struct Exposition {
    pub types: HashMap<String, String>,
    pub samples: BTreeMap<String, f64>,
}

fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

pub fn parse(text: &str) -> Exposition {
    let mut types = HashMap::new();
    let mut helped = std::collections::HashSet::new();
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').unwrap_or((rest, ""));
            assert!(valid_name(name) && helped.insert(name.to_string()), "bad or repeated HELP: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(line);
            assert!(valid_name(name), "{line}");
            assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind), "{line}");
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "TYPE twice: {line}");
            continue;
        }
        assert!(!line.starts_with('#') && !line.is_empty(), "unexpected line {line:?}");
        let (series, value) = line.rsplit_once(' ').expect(line);
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.strip_suffix('}').expect(line)),
            None => (series, ""),
        };
        assert!(valid_name(name), "{line}");
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (key, after) = rest.split_once("=\"").expect(line);
            assert!(valid_name(key), "bad label in {line}");
            let end = after.find('"').expect(line);
            assert!(!after[..end].contains('\\'), "escapes are not expected here: {line}");
            pairs.push((key.to_string(), after[..end].to_string()));
            rest = after[end + 1..].strip_prefix(',').unwrap_or(&after[end + 1..]);
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| types.get(*f).is_some_and(|t| t == "histogram")))
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample of an undeclared family: {line}");
        pairs.sort();
        let key =
            format!("{name}{{{}}}", pairs.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect::<Vec<_>>().join(","));
        assert!(samples.insert(key, value).is_none(), "sample twice: {line}");
    }
    Exposition { types, samples }
}

impl Exposition {
    /// The sample `series` (`name{k="v",…}` with labels sorted).
    pub fn get(&self, series: &str) -> f64 {
        *self.samples.get(series).unwrap_or_else(|| panic!("no sample {series} in {:#?}", self.samples))
    }

    pub fn has_family(&self, prefix: &str) -> bool {
        self.samples.keys().any(|k| k.starts_with(prefix))
    }

    /// A histogram's buckets are cumulative and its `+Inf` bucket is its count; returns the count.
    pub fn histogram_count(&self, name: &str, labels: &str) -> f64 {
        assert_eq!(self.types.get(name).map(String::as_str), Some("histogram"), "{name}");
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter_map(|(k, v)| {
                let inner = k.strip_prefix(&format!("{name}_bucket{{"))?.strip_suffix('}')?;
                let mut le = None;
                let rest: Vec<&str> = inner
                    .split(',')
                    .filter(|p| match p.strip_prefix("le=\"") {
                        Some(b) => {
                            le = Some(b.trim_end_matches('"').to_string());
                            false
                        }
                        None => true,
                    })
                    .collect();
                (rest.join(",") == labels).then(|| {
                    let le = le.unwrap();
                    (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, *v)
                })
            })
            .collect();
        assert!(!buckets.is_empty(), "no buckets of {name}{{{labels}}}");
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "buckets not cumulative: {buckets:?}");
        let count = self.get(&format!("{name}_count{{{labels}}}"));
        assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count), "+Inf bucket is the count");
        assert!(self.samples.contains_key(&format!("{name}_sum{{{labels}}}")), "no sum of {name}{{{labels}}}");
        count
    }
}
