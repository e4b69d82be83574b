//! Partition versions: what a node's copy of a partition is, as the nodes
//! exchange it after every membership change.
//!
//! A version names the cluster key at which the copy's lineage was
//! established, a family (copies of one key that diverged), and whether the
//! copy was the working master's and whether it may be missing records
//! (`subset`). Two copies with the same key and family, both full, hold the
//! same records: every write acknowledged since the key was set reached
//! both. Anything else may differ, and is merged record by record.
//!
//! Strong consistency adds two flags, as Aerospike's partition versions
//! have them: `evade` (`e`: the copy came back from a restart that may have
//! lost writes it had acknowledged, such as a kill -9 without
//! commit-to-device, so it never counts as the partition's data) and
//! `revived` (`r`: an operator revived the partition here with `revive:`,
//! accepting whatever its copies hold).

/// One node's version of one partition. `key == 0` means "no data".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Version {
    /// The cluster key (48 bits) at which this copy's lineage was set.
    pub key: u64,
    pub family: u8,
    /// The copy was the working master's.
    pub master: bool,
    /// The copy may be missing records (it was being filled).
    pub subset: bool,
    /// (SC) untrusted: back from an unclean restart without
    /// commit-to-device (or from memory), it may miss acknowledged writes.
    pub evade: bool,
    /// (SC) revived here by the operator (`revive:`).
    pub revived: bool,
}

impl Version {
    pub const NULL: Version = Version {
        key: 0,
        family: 0,
        master: false,
        subset: false,
        evade: false,
        revived: false,
    };

    #[inline]
    pub fn is_null(&self) -> bool {
        self.key == 0
    }

    /// A full copy of the lineage set at `key`.
    pub fn full(key: u64) -> Version {
        Version {
            key,
            ..Version::NULL
        }
    }

    /// A copy of the lineage set at `key` that is still being filled.
    pub fn partial(key: u64) -> Version {
        Version {
            subset: true,
            ..Version::full(key)
        }
    }

    pub fn with_master(self, master: bool) -> Version {
        Version { master, ..self }
    }

    /// Same key and family, both full: the copies hold the same records.
    pub fn same_full_lineage(&self, other: &Version) -> bool {
        !self.is_null()
            && self.is_full()
            && other.is_full()
            && self.key == other.key
            && self.family == other.family
    }

    /// Neither a subset nor untrusted.
    #[inline]
    pub fn is_full(&self) -> bool {
        !self.subset && !self.evade
    }

    /// How good a copy is to serve from when no master copy survives.
    pub fn score(&self) -> u8 {
        match (self.is_null(), self.is_full()) {
            (true, _) => 0,
            (false, false) => 1,
            (false, true) => 2,
        }
    }

    /// Eight bytes on the wire: 48-bit key, family, flags.
    pub fn to_bits(self) -> u64 {
        let flags = u64::from(self.master)
            | (u64::from(self.subset) << 1)
            | (u64::from(self.evade) << 2)
            | (u64::from(self.revived) << 3);
        (self.key & KEY_MASK) | (u64::from(self.family) << 48) | (flags << 56)
    }

    pub fn from_bits(bits: u64) -> Version {
        Version {
            key: bits & KEY_MASK,
            family: (bits >> 48) as u8,
            master: bits >> 56 & 1 != 0,
            subset: bits >> 57 & 1 != 0,
            evade: bits >> 58 & 1 != 0,
            revived: bits >> 59 & 1 != 0,
        }
    }
}

/// Cluster keys are 48 bits.
pub const KEY_MASK: u64 = (1 << 48) - 1;

impl std::fmt::Display for Version {
    /// `KKKKKKKKKKKK.F.mse` as Aerospike prints versions: `m` master or
    /// `-`; `p` full or `s` subset; `e` untrusted, `r` revived or `-`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:012x}.", self.key)?;
        if self.family == 15 {
            f.write_str("U")?;
        } else {
            write!(f, "{:X}", self.family)?;
        }
        write!(
            f,
            ".{}{}{}",
            if self.master { 'm' } else { '-' },
            if self.subset { 's' } else { 'p' },
            if self.evade {
                'e'
            } else if self.revived {
                'r'
            } else {
                '-'
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip() {
        let version = Version {
            key: 0x9A1E_5C3B_77D2,
            family: 3,
            master: true,
            subset: true,
            evade: false,
            revived: false,
        };
        assert_eq!(Version::from_bits(version.to_bits()), version);
        assert_eq!(Version::from_bits(0), Version::NULL);
        assert_eq!(version.to_string(), "9a1e5c3b77d2.3.ms-");
        for (evade, revived) in [(true, false), (false, true), (true, true)] {
            let flagged = Version {
                evade,
                revived,
                ..version
            };
            assert_eq!(Version::from_bits(flagged.to_bits()), flagged);
        }
        let untrusted = Version {
            evade: true,
            ..Version::full(7)
        };
        assert_eq!(untrusted.to_string(), "000000000007.0.-pe");
    }

    #[test]
    fn lineage() {
        let a = Version::full(7).with_master(true);
        assert!(a.same_full_lineage(&Version::full(7)));
        assert!(!a.same_full_lineage(&Version::partial(7)));
        assert!(!a.same_full_lineage(&Version::full(8)));
        assert!(!Version::NULL.same_full_lineage(&Version::NULL));
    }
}
