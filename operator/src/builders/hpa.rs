//! The HorizontalPodAutoscaler (`autoscaling/v2`) of `spec.autoscaling`, per the autoscaling
//! contract: it scales the ContentServer through its scale subresource on the per-pod metric
//! `contentserver_pool_utilization` (the busiest volume's busy threads / threads, served by the
//! metrics adapter), optionally on CPU, with a long scale-down stabilization window. Pure.
//!
//! The chain: HPA -> ContentServer `/scale` (spec.replicas) -> the operator copies spec.replicas
//! onto the workload -> pods. The HPA is the only writer of spec.replicas (through `/scale`); the
//! operator never writes the ContentServer's spec and stays the only writer of the workload's.

use crate::builders::{child_meta, workload_name};
use crate::crd::{ContentServer, GROUP};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HPAScalingRules, HorizontalPodAutoscaler,
    HorizontalPodAutoscalerBehavior, HorizontalPodAutoscalerSpec, MetricIdentifier, MetricSpec,
    MetricTarget, PodsMetricSource, ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

/// The per-pod metric the adapter serves.
pub const POOL_UTILIZATION_METRIC: &str = "contentserver_pool_utilization";

/// `percent` / 100 as a Quantity: 70 -> `700m`, 100 -> `1`.
pub fn utilization_quantity(percent: i32) -> Quantity {
    if percent % 100 == 0 {
        Quantity((percent / 100).to_string())
    } else {
        Quantity(format!("{}m", percent * 10))
    }
}

/// The HPA, or None without `spec.autoscaling`.
pub fn hpa(cs: &ContentServer) -> Option<HorizontalPodAutoscaler> {
    let a = cs.spec.autoscaling.as_ref()?;
    let mut metrics = vec![MetricSpec {
        type_: "Pods".into(),
        pods: Some(PodsMetricSource {
            metric: MetricIdentifier {
                name: POOL_UTILIZATION_METRIC.into(),
                selector: None,
            },
            target: MetricTarget {
                type_: "AverageValue".into(),
                average_value: Some(utilization_quantity(a.target_pool_utilization)),
                ..MetricTarget::default()
            },
        }),
        ..MetricSpec::default()
    }];
    if let Some(cpu) = a.target_cpu_utilization {
        metrics.push(MetricSpec {
            type_: "Resource".into(),
            resource: Some(ResourceMetricSource {
                name: "cpu".into(),
                target: MetricTarget {
                    type_: "Utilization".into(),
                    average_utilization: Some(cpu),
                    ..MetricTarget::default()
                },
            }),
            ..MetricSpec::default()
        });
    }
    Some(HorizontalPodAutoscaler {
        metadata: child_meta(cs, workload_name(cs)),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some(format!("{GROUP}/v1alpha1")),
                kind: "ContentServer".into(),
                name: cs.name_any(),
            },
            min_replicas: Some(a.min_replicas),
            max_replicas: a.max_replicas,
            metrics: Some(metrics),
            behavior: Some(HorizontalPodAutoscalerBehavior {
                scale_down: Some(HPAScalingRules {
                    stabilization_window_seconds: Some(a.scale_down_stabilization_seconds),
                    ..HPAScalingRules::default()
                }),
                ..HorizontalPodAutoscalerBehavior::default()
            }),
        }),
        ..HorizontalPodAutoscaler::default()
    })
}
