//! An event's CloudEvents attributes and extensions, held as deltaship sets them: the
//! values the same for a whole watch shared, the object's identity moved in from its
//! change, nothing in a map. The bindings write them out from here; an SDK `Event` is
//! built only where one is needed (structured content mode).

use std::sync::Arc;

use cloudevents::event::AttributesWriter;
use cloudevents::{Event, EventBuilder, EventBuilderV10};

use super::EventTime;
use crate::model::ObjectRef;

#[derive(Debug, Clone, PartialEq)]
pub struct Attributes {
    pub id: String,
    pub ty: &'static str,
    pub source: Arc<str>,
    pub subject: Option<String>,
    pub time: EventTime,
    pub datacontenttype: &'static str,
    pub dataschema: Option<url::Url>,
    /// The extensions `cluster`, `apiversion` and `kind`: the same for a whole watch.
    pub cluster: Arc<str>,
    pub apiversion: Arc<str>,
    pub kind: Arc<str>,
    /// The extensions `name`, `namespace`, `uid` and `resourceversion`: of object events.
    pub object: Option<ObjectRef>,
    pub syncid: Option<Arc<str>>,
    pub partitionkey: String,
    /// The extension `truncated = true`: the event is a reference to an object too large
    /// for the sink.
    pub truncated: bool,
}

impl Attributes {
    /// How many (name, value) pairs `pairs` yields at most.
    pub const MOST: usize = 18;

    /// Every attribute and extension that is set, as (name, canonical string value) in the
    /// CloudEvents type system, `specversion` and `datacontenttype` included, all borrowed:
    /// nothing is written out per event.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let context: [Option<(&'static str, &str)>; 8] = [
            Some(("specversion", "1.0")),
            Some(("id", self.id.as_str())),
            Some(("type", self.ty)),
            Some(("source", &*self.source)),
            self.subject.as_deref().map(|s| ("subject", s)),
            Some(("time", self.time.as_str())),
            Some(("datacontenttype", self.datacontenttype)),
            self.dataschema.as_ref().map(|u| ("dataschema", u.as_str())),
        ];
        let truncated = self.truncated.then_some(("truncated", "true"));
        context.into_iter().flatten().chain(self.text_extensions()).chain(truncated)
    }

    /// The extensions whose values are text (all but `truncated`), as (name, value).
    fn text_extensions(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let object = self.object.as_ref();
        let extensions: [Option<(&'static str, &str)>; 9] = [
            Some(("cluster", &*self.cluster)),
            Some(("apiversion", &*self.apiversion)),
            Some(("kind", &*self.kind)),
            object.map(|o| ("name", o.name.as_str())),
            object.and_then(|o| o.namespace.as_deref()).map(|ns| ("namespace", ns)),
            object.map(|o| ("uid", o.uid.as_str())),
            object.map(|o| ("resourceversion", o.resource_version.as_str())),
            self.syncid.as_deref().map(|s| ("syncid", s)),
            Some(("partitionkey", self.partitionkey.as_str())),
        ];
        extensions.into_iter().flatten()
    }

    /// The same attributes as the CloudEvents SDK's event (without data).
    pub fn to_event(&self) -> Event {
        let mut b = EventBuilderV10::new().id(self.id.as_str()).ty(self.ty).source(&*self.source).time(self.time.at());
        if let Some(s) = &self.subject {
            b = b.subject(s.as_str());
        }
        let mut event = b.build().expect("deltaship's events have an id, a type and a source");
        event.set_datacontenttype(Some(self.datacontenttype));
        event.set_dataschema(self.dataschema.clone());
        for (name, value) in self.text_extensions() {
            event.set_extension(name, value);
        }
        if self.truncated {
            event.set_extension("truncated", true);
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::AttributesReader;

    /// Attributes of an object event (`object`) or a marker, truncated or not, with a schema
    /// when truncated: every attribute deltaship sets appears in one of them.
    fn attributes(object: bool, truncated: bool) -> Attributes {
        Attributes {
            id: "d1663f191e609909656ae5aca860682c".into(),
            ty: "dev.deltaship.object.updated",
            source: "//c/api/v1/configmaps".into(),
            subject: object.then(|| "ns/a".into()),
            time: EventTime::new(chrono::DateTime::parse_from_rfc3339("2026-11-25T08:30:00.5Z").unwrap().with_timezone(&chrono::Utc)),
            datacontenttype: "application/json",
            dataschema: truncated.then(|| url::Url::parse("https://schemas.example.com/reference.schema.json").unwrap()),
            cluster: "c".into(),
            apiversion: "v1".into(),
            kind: "ConfigMap".into(),
            object: object.then(|| ObjectRef { namespace: Some("ns".into()), name: "a".into(), uid: "u1".into(), resource_version: "2".into() }),
            syncid: (!object).then(|| "s1".into()),
            partitionkey: "ns/a".into(),
            truncated,
        }
    }

    #[test]
    fn every_attribute_deltaship_writes_is_reserved_from_knative_overrides() {
        for (object, truncated) in [(true, true), (false, false)] {
            for (name, _) in attributes(object, truncated).pairs() {
                assert!(crate::config::RESERVED_ATTRIBUTES.contains(&name), "`{name}` can be replaced by K_CE_OVERRIDES: add it to RESERVED_ATTRIBUTES");
            }
        }
    }

    #[test]
    fn the_pairs_are_what_the_sdk_holds_for_the_same_event() {
        for (object, truncated) in [(true, false), (true, true), (false, false)] {
            let a = attributes(object, truncated);
            let mut ours: Vec<(String, String)> = a.pairs().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            let mut sdk: Vec<(String, String)> = a.to_event().iter().map(|(n, v)| (n.to_string(), v.to_string())).collect();
            ours.sort();
            sdk.sort();
            assert_eq!(ours, sdk);
            assert!(ours.len() <= Attributes::MOST);
        }
    }

    #[test]
    fn times_and_flags_are_written_in_their_canonical_form() {
        let a = attributes(true, true);
        let pairs: Vec<_> = a.pairs().collect();
        assert!(pairs.contains(&("time", "2026-11-25T08:30:00.500+00:00")), "{pairs:?}");
        assert!(pairs.contains(&("truncated", "true")));
        assert_eq!(a.to_event().extension("truncated"), Some(&cloudevents::event::ExtensionValue::Boolean(true)));
        assert!(!attributes(true, false).pairs().any(|(n, _)| n == "truncated"), "only a truncated event says so");
    }

    #[test]
    fn a_marker_has_no_object_extensions_and_no_subject() {
        let names: Vec<_> = attributes(false, false).pairs().map(|(n, _)| n).collect();
        for absent in ["subject", "name", "namespace", "uid", "resourceversion", "truncated", "dataschema"] {
            assert!(!names.contains(&absent), "{absent} in {names:?}");
        }
        assert!(names.contains(&"syncid"));
        assert_eq!(attributes(false, false).to_event().subject(), None);
    }
}
