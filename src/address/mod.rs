//! Routing: where an event goes (Kafka topic or NATS subject) and its partition key.

mod render;

use std::sync::Arc;

use crate::config::Template;
use crate::model::subject::encode_token;
use crate::model::{MarkerSlot, ObjectRef, ResourceType};

use render::{Names, Style, render};

/// Where the events of one watched resource go and how they are keyed.
#[derive(Debug, Clone)]
pub struct Address {
    destination: Target,
    /// Prepended to object keys when several resources may share a destination, so that a
    /// ConfigMap and a Secret of the same name never share a key (compaction would merge
    /// them): `<plural>.<group>/`, empty otherwise.
    pub key_prefix: String,
    /// The start of marker keys, `/deltaship/sync/<resource>` (see `Address::marker_key`): it starts
    /// with `/`, which no object key can (namespace and object names never contain `/` and
    /// are never empty).
    marker_key_base: String,
}

/// Where a resource's events go: its Kafka topic, or its NATS subjects.
#[derive(Debug, Clone)]
enum Target {
    /// One Kafka topic for the resource: objects and markers.
    Topic(Arc<str>),
    /// A NATS subject per object, rendered from the template, and one marker subject.
    Subject { cluster: Arc<str>, resource: ResourceType, template: Template, marker: Arc<str> },
}

impl Address {
    /// A Kafka route: the template names the topic.
    pub fn topic(cluster: &str, resource: &ResourceType, template: &Template) -> Address {
        let names = Names { cluster, resource, namespace: None, name: None };
        Address {
            destination: Target::Topic(render(template, Style::Topic, &names).into()),
            key_prefix: key_prefix(resource, template),
            marker_key_base: marker_key_base(resource),
        }
    }

    /// A NATS route: `template` names each object's subject, `marker` the subject of the
    /// resource's sync markers.
    pub fn subject(cluster: &str, resource: &ResourceType, template: &Template, marker: &Template) -> Address {
        let names = Names { cluster, resource, namespace: None, name: None };
        Address {
            destination: Target::Subject {
                cluster: cluster.into(),
                resource: resource.clone(),
                template: template.clone(),
                marker: render(marker, Style::Subject, &names).into(),
            },
            key_prefix: key_prefix(resource, template),
            marker_key_base: marker_key_base(resource),
        }
    }

    /// The topic or subject of an object's events.
    pub fn object_destination(&self, r: &ObjectRef) -> Arc<str> {
        match &self.destination {
            Target::Topic(t) => t.clone(),
            Target::Subject { cluster, resource, template, .. } => {
                let names = Names { cluster, resource, namespace: r.namespace.as_deref(), name: Some(&r.name) };
                render(template, Style::Subject, &names).into()
            }
        }
    }

    /// The topic of the resource's sync markers, or the NATS subject they start with.
    pub fn marker_destination(&self) -> Arc<str> {
        match &self.destination {
            Target::Topic(t) => t.clone(),
            Target::Subject { marker, .. } => marker.clone(),
        }
    }

    /// The topic of a marker, or its subject: the marker subject followed by the slot's
    /// tokens, `<marker subject>.<namespace>.<mode>.<phase>` (namespace `_` for every
    /// namespace, encoded like any subject token).
    pub fn marker_destination_of(&self, slot: MarkerSlot) -> Arc<str> {
        match &self.destination {
            Target::Topic(t) => t.clone(),
            Target::Subject { marker, .. } => format!("{marker}.{}.{}.{}", encode_token(slot.namespace), slot.mode.as_str(), slot.phase.as_str()).into(),
        }
    }

    /// The key of a marker record: `/deltaship/sync/<resource>/<namespace>/<mode>/<phase>`,
    /// namespace `*` for every namespace (no namespace is named `*`).
    pub fn marker_key(&self, slot: MarkerSlot) -> String {
        format!("{}/{}/{}/{}", self.marker_key_base, slot.namespace.unwrap_or("*"), slot.mode.as_str(), slot.phase.as_str())
    }

    /// The partition key of an object: `namespace/name` or `name`, with the prefix.
    pub fn key(&self, object_key: &str) -> String {
        format!("{}{}", self.key_prefix, object_key)
    }

    /// Whether partition keys are the object keys themselves (no prefix: the topic or
    /// subject names the resource).
    pub fn keys_are_object_keys(&self) -> bool {
        self.key_prefix.is_empty()
    }
}

fn key_prefix(resource: &ResourceType, template: &Template) -> String {
    if template.names_resource() { String::new() } else { format!("{}/", resource.label()) }
}

fn marker_key_base(resource: &ResourceType) -> String {
    format!("/deltaship/sync/{}", resource.label())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::*;
    use crate::model::subject::decode_token;
    use crate::model::{MarkerPhase, SyncMode};

    fn object(ns: Option<&str>, name: &str) -> ObjectRef {
        ObjectRef { namespace: ns.map(Into::into), name: name.into(), uid: "u".into(), resource_version: "1".into() }
    }

    #[test]
    fn default_topic_template_gives_one_topic_per_resource() {
        let t = Template::parse("deltaship.{cluster}.{group}.{plural}").unwrap();
        let r = Address::topic("prod", &configmaps(), &t);
        assert_eq!(&*r.object_destination(&object(Some("ns"), "a")), "deltaship.prod.core.configmaps");
        let r = Address::topic("prod", &deployments(), &t);
        assert_eq!(&*r.marker_destination(), "deltaship.prod.apps.deployments");
        assert_eq!(r.key("ns/web"), "ns/web");
        let slot = MarkerSlot { namespace: Some("ns"), mode: SyncMode::Full, phase: MarkerPhase::Started };
        assert_eq!(r.marker_key(slot), "/deltaship/sync/deployments.apps/ns/full/started");
        let every = MarkerSlot { namespace: None, mode: SyncMode::Diff, phase: MarkerPhase::Completed };
        assert_eq!(r.marker_key(every), "/deltaship/sync/deployments.apps/*/diff/completed");
    }

    #[test]
    fn shared_topic_prefixes_keys_with_the_resource() {
        let t = Template::parse("k8s-{cluster}").unwrap();
        assert!(!t.names_resource());
        let r = Address::topic("c", &configmaps(), &t);
        assert_eq!(&*r.marker_destination(), "k8s-c");
        assert_eq!(r.key("ns/a"), "configmaps/ns/a");
    }

    #[test]
    fn subjects_encode_each_field_as_one_reversible_token() {
        let t = Template::parse("deltaship.{cluster}.{group}.{kind}.{namespace}.{name}").unwrap();
        let m = Template::parse("deltaship.{cluster}.{group}.{kind}._sync").unwrap();
        let r = Address::subject("prod", &configmaps(), &t, &m);
        let s = r.object_destination(&object(Some("ns"), "app.settings"));
        assert_eq!(&*s, "deltaship.prod._.configmap.ns.app%2Esettings");
        let tokens: Vec<&str> = s.split('.').collect();
        assert_eq!(tokens.len(), 6);
        assert_eq!(decode_token(tokens[5]).unwrap().as_deref(), Some("app.settings"));
        assert_eq!(decode_token(tokens[2]).unwrap(), None, "core group");
        assert_eq!(&*r.marker_destination(), "deltaship.prod._.configmap._sync");
        let ns = crate::model::ResourceType { namespaced: false, kind: "Namespace".into(), plural: "namespaces".into(), ..configmaps() };
        let r = Address::subject("prod", &ns, &t, &m);
        assert_eq!(&*r.object_destination(&object(None, "kube-system")), "deltaship.prod._.namespace._.kube-system");
    }
}
