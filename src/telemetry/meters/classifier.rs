//! The metrics of a watch's classifier: its syncs and relists, and the events it did not
//! ship (nothing visible changed, already delivered, older than what was shipped).

use std::sync::Arc;

use super::counters::Counters;
use crate::model::SyncReason;
use crate::telemetry::metrics::{self as m, label};

/// The handles of one watch's classifier, each registered on its first count.
#[derive(Debug)]
pub struct ClassifierMeters {
    resource: Arc<str>,
    syncs: Counters<SyncReason>,
    relists: Counters<()>,
    skips: Counters<&'static str>,
    stale: Counters<()>,
    deferred: Counters<()>,
}

impl ClassifierMeters {
    /// The handles of a watch of `resource` (its metric label).
    pub fn new(resource: Arc<str>) -> ClassifierMeters {
        ClassifierMeters {
            resource,
            syncs: Counters::default(),
            relists: Counters::default(),
            skips: Counters::default(),
            stale: Counters::default(),
            deferred: Counters::default(),
        }
    }

    /// A completed sync (or state marker) of `reason`.
    pub fn synced(&mut self, reason: SyncReason) {
        let resource = &self.resource;
        self.syncs.increment(reason, 1, |r| metrics::counter!(m::SYNCS, label::RESOURCE => resource.clone(), label::REASON => r.as_str()));
    }

    /// A relist began.
    pub fn relisted(&mut self) {
        let resource = &self.resource;
        self.relists.increment((), 1, |()| metrics::counter!(m::RELISTS, label::RESOURCE => resource.clone()));
    }

    /// An update not shipped for `reason` (`resource_version`, `fingerprint`, `delivered`).
    pub fn skipped(&mut self, reason: &'static str) {
        let resource = &self.resource;
        self.skips.increment(reason, 1, |r| metrics::counter!(m::DEDUPE_SKIPS, label::RESOURCE => resource.clone(), label::REASON => r));
    }

    /// An event older than the state already shipped for its object.
    pub fn stale(&mut self) {
        let resource = &self.resource;
        self.stale.increment((), 1, |()| metrics::counter!(m::STALE_EVENTS, label::RESOURCE => resource.clone()));
    }

    /// A periodic resync not run: the index lacked shipped content.
    pub fn resync_deferred(&mut self) {
        let resource = &self.resource;
        self.deferred.increment((), 1, |()| metrics::counter!(m::RESYNCS_DEFERRED, label::RESOURCE => resource.clone()));
    }
}
