//! Routes: which URI prefix is served by which volume (or split over several). API shape only.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A URI prefix served by one volume or spread over several.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.volume) != (has(self.split) && size(self.split) > 0)",
        "message": "set exactly one of volume and split"
    },
    {
        "rule": "!has(self.split) || size(self.split) == 0 || (has(self.split[size(self.split) - 1].percent) ? (self.split.map(t, has(t.percent) ? double(t.percent) : 0.0).sum() >= 99.999999999 && self.split.map(t, has(t.percent) ? double(t.percent) : 0.0).sum() <= 100.000000001) : self.split.map(t, has(t.percent) ? double(t.percent) : 0.0).sum() <= 99.999900001)",
        "message": "split percentages must add up to 100, or to less than 100 when the last target leaves its percent out (it takes the rest)",
        "fieldPath": ".split"
    },
    {
        "rule": "!has(self.split) || self.split.filter(t, !has(t.percent)).size() == 0 || (self.split.filter(t, !has(t.percent)).size() == 1 && !has(self.split[size(self.split) - 1].percent))",
        "message": "only the last split target may omit percent (it takes the rest)",
        "fieldPath": ".split"
    }
]))]
pub struct RouteSpec {
    /// URI path prefix starting with `/`; the longest match wins.
    #[schemars(length(min = 1, max = 1024), regex(pattern = r"^/"))]
    pub prefix: String,
    /// Serve the prefix from this volume.
    pub volume: Option<String>,
    /// Spread the prefix over volumes by a stable hash of the URI path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub split: Vec<SplitTargetSpec>,
    /// Remove the prefix before the lookup in the volume.
    #[serde(default)]
    pub strip_prefix: bool,
    /// Response headers, CORS, precompressed siblings and listings of this route.
    pub http: Option<super::RouteHttpSpec>,
    /// Present = fetch the prefix from spec.origin through the route's cache volumes.
    pub cache: Option<super::RouteCacheSpec>,
}

/// One share of a split.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SplitTargetSpec {
    /// Volume name.
    #[schemars(length(min = 1, max = 59))]
    pub volume: String,
    /// Share in percent (0 < percent <= 100); omit on the last target to take the rest.
    #[schemars(range(min = 0.0001, max = 100))]
    pub percent: Option<f64>,
}
