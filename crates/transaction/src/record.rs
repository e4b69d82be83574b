//! The records expressions read ([`expression::Record`]): a stored record
//! with its metadata, and the working copy of a write.

use bolide_particles::expression::Record;
use bolide_particles::ops::WorkBin;
use bolide_store::{RecordMeta, RecordView};
use bolide_types::Digest;

/// A stored record as a filter, an expression read or an expression index
/// sees it.
pub struct Stored<'a> {
    pub record: &'a RecordView<'a>,
    pub digest: &'a Digest,
    pub meta: &'a RecordMeta,
    pub set_name: Option<&'a str>,
    pub record_bytes: usize,
}

impl Record for Stored<'_> {
    fn bin(&self, name: &[u8]) -> Option<(u8, &[u8])> {
        self.record
            .bin(name)
            .map(|bin| (bin.particle_type, bin.value))
    }

    fn digest(&self) -> &Digest {
        self.digest
    }

    fn key(&self) -> Option<(u8, &[u8])> {
        self.record.key
    }

    fn last_update_ms(&self) -> u64 {
        self.meta.last_update_ms
    }

    fn void_time(&self) -> u32 {
        self.meta.void_time
    }

    fn set_name(&self) -> Option<&str> {
        self.set_name
    }

    fn size_bytes(&self) -> usize {
        self.record_bytes
    }
}

/// A write's working copy: the bins with the request's earlier ops
/// applied, and the record as it was before the request.
pub struct Working<'a> {
    pub bins: &'a [WorkBin<'a>],
    pub digest: &'a Digest,
    pub meta: RecordMeta,
    pub key: Option<(u8, &'a [u8])>,
    pub set_name: Option<&'a str>,
    pub record_bytes: usize,
}

impl Record for Working<'_> {
    fn bin(&self, name: &[u8]) -> Option<(u8, &[u8])> {
        self.bins
            .iter()
            .find(|bin| bin.name == name)
            .map(|bin| (bin.particle_type, bin.value.as_ref()))
    }

    fn digest(&self) -> &Digest {
        self.digest
    }

    fn key(&self) -> Option<(u8, &[u8])> {
        self.key
    }

    fn last_update_ms(&self) -> u64 {
        self.meta.last_update_ms
    }

    fn void_time(&self) -> u32 {
        self.meta.void_time
    }

    fn set_name(&self) -> Option<&str> {
        self.set_name
    }

    fn size_bytes(&self) -> usize {
        self.record_bytes
    }
}
