//! Fencing a deposed leader. A new leader claims each route before it ships anything, so
//! that a leader frozen past its lease (and thawed) can deliver nothing more:
//! - Kafka: the route's producer is transactional, with an id every replica shares
//!   (`transactional_id`); initialising it bumps the id's epoch at the brokers, which then
//!   refuse the old producer's records and abort its open transaction.
//! - NATS JetStream: the leader publishes a fence record (`FenceRecord`) and every later
//!   publish of its term expects that record to be the last on the fence subject; a
//!   successor's fence record makes the stream refuse them.
//!
//! A publish refused so is `ErrorKind::Fenced`: fatal, the deposed replica stops.

use bytes::Bytes;
use chrono::{SecondsFormat, Utc};

/// The lease a leader holds: what its fence names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub cluster: String,
    pub namespace: String,
    pub name: String,
    /// This replica's identity in the lease.
    pub holder: String,
}

/// The CloudEvent type of a fence record: not one of the contract's object or marker types,
/// so consumers skip it as a foreign event.
pub const FENCE_TYPE: &str = "dev.deltaship.leader.elected";

/// The transactional id of a Kafka route's producer: the same on every replica of one
/// lease, different per route (`route` is the route's name).
pub fn transactional_id(lease: &Lease, route: &str) -> String {
    format!("deltaship/{}/{}/{}/{}", lease.cluster, lease.namespace, lease.name, route)
}

/// A fence record as a binary-mode CloudEvent: its header pairs and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceRecord {
    pub id: String,
    pub headers: Vec<(&'static str, String)>,
    pub data: Bytes,
}

impl FenceRecord {
    /// The record `lease`'s holder publishes when its term begins; `id` is unique per term.
    pub fn new(lease: &Lease, id: String) -> FenceRecord {
        let time = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
        let source = format!("//{}/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}", lease.cluster, lease.namespace, lease.name);
        let data = serde_json::json!({"lease": {"namespace": lease.namespace, "name": lease.name}, "holder": lease.holder});
        let headers = vec![
            ("ce-specversion", "1.0".to_string()),
            ("ce-id", id.clone()),
            ("ce-type", FENCE_TYPE.to_string()),
            ("ce-source", source),
            ("ce-time", time),
            ("ce-cluster", lease.cluster.clone()),
            ("ce-datacontenttype", "application/json".to_string()),
        ];
        FenceRecord { id, headers, data: Bytes::from(data.to_string()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> Lease {
        Lease { cluster: "prod".into(), namespace: "ops".into(), name: "deltaship".into(), holder: "pod-a-1234".into() }
    }

    #[test]
    fn replicas_of_one_lease_share_a_route_s_transactional_id_and_routes_do_not() {
        let other = Lease { holder: "pod-b-5678".into(), ..lease() };
        assert_eq!(transactional_id(&lease(), "audit"), transactional_id(&other, "audit"));
        assert_eq!(transactional_id(&lease(), "audit"), "deltaship/prod/ops/deltaship/audit");
        assert_ne!(transactional_id(&lease(), "audit"), transactional_id(&lease(), "analytics"));
    }

    #[test]
    fn a_fence_record_is_a_cloudevent_of_a_foreign_type_naming_its_lease_and_holder() {
        let r = FenceRecord::new(&lease(), "f-1".into());
        let header = |name: &str| r.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        assert_eq!(header("ce-type"), Some(FENCE_TYPE));
        assert_eq!(header("ce-id"), Some("f-1"));
        assert_eq!(header("ce-source"), Some("//prod/apis/coordination.k8s.io/v1/namespaces/ops/leases/deltaship"));
        assert_eq!(header("ce-cluster"), Some("prod"));
        let data: serde_json::Value = serde_json::from_slice(&r.data).unwrap();
        assert_eq!(data, serde_json::json!({"lease": {"namespace": "ops", "name": "deltaship"}, "holder": "pod-a-1234"}));
    }
}
