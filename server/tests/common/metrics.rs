//! Samples of a Prometheus text exposition (what `/metrics` serves and what
//! `content_server::metrics::Metrics::render` returns), looked up by name and labels.

use std::collections::BTreeMap;

/// Samples of one exposition: (name, sorted labels) -> value.
pub struct Metrics {
    pub text: String,
    pub samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("sample line has a value");
            let value: f64 = value.parse().expect("numeric sample value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
                None => (series, Vec::new()),
            };
            samples.insert((name.to_string(), labels), value);
        }
        Metrics {
            text: text.to_string(),
            samples,
        }
    }

    /// The value of `name{labels}` (labels in any order, all of them), if present.
    pub fn try_get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut l: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        l.sort();
        self.samples.get(&(name.to_string(), l)).copied()
    }

    /// As `try_get`, panicking with the exposition when the series is missing.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.try_get(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in\n{}", self.text))
    }

    /// Sum of every sample of `name` whose labels include `filter`.
    pub fn sum(&self, name: &str, filter: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && filter
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, v)| *v)
            .sum()
    }
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').expect("label k=v");
        out.push((k.to_string(), v.trim_matches('"').to_string()));
    }
    out.sort();
    out
}
