//! Role allowlists ("whitelists" on the wire): the client addresses a
//! role's users may log in from. Entries are IPv4 or IPv6 addresses or
//! networks in canonical CIDR form (`10.0.2.0/24`, not `10.0.2.1/24`);
//! anything else is refused with 73. Entries are kept verbatim and in
//! order, as clients read them back.

use std::net::IpAddr;

/// The most entries one role's allowlist may hold.
pub const ENTRIES_MAX: usize = 256;

/// One parsed entry: an address and the length of its network prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    address: IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses an entry; None if it is not an address or a canonical CIDR.
    pub fn parse(entry: &str) -> Option<Network> {
        let (address, prefix) = match entry.split_once('/') {
            None => {
                let address: IpAddr = entry.parse().ok()?;
                (address, bits(address))
            }
            Some((address, prefix)) => {
                let address: IpAddr = address.parse().ok()?;
                if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let prefix: u8 = prefix.parse().ok()?;
                if prefix > bits(address) {
                    return None;
                }
                (address, prefix)
            }
        };
        let network = Network { address, prefix };
        // Canonical: no host bits set below the prefix.
        if network.masked(address) != address {
            return None;
        }
        Some(network)
    }

    fn masked(&self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => {
                let shift = 32 - u32::from(self.prefix.min(32));
                let mask = u32::MAX.checked_shl(shift).unwrap_or(0);
                IpAddr::from((u32::from(v4) & mask).to_be_bytes())
            }
            IpAddr::V6(v6) => {
                let shift = 128 - u32::from(self.prefix.min(128));
                let mask = u128::MAX.checked_shl(shift).unwrap_or(0);
                IpAddr::from((u128::from(v6) & mask).to_be_bytes())
            }
        }
    }

    /// Whether `client` is inside (an IPv4 client seen through an IPv6
    /// socket, `::ffff:a.b.c.d`, counts as its IPv4 address).
    pub fn contains(&self, client: IpAddr) -> bool {
        let client = client.to_canonical();
        match (self.address, client) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                self.masked(client) == self.address
            }
            _ => false,
        }
    }
}

fn bits(address: IpAddr) -> u8 {
    match address {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Parses every entry; the first bad one is returned as the error.
pub fn parse_all<'e>(entries: &[&'e str]) -> Result<Vec<Network>, &'e str> {
    entries
        .iter()
        .map(|entry| Network::parse(entry).ok_or(*entry))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn addresses_and_canonical_networks_parse() {
        for good in [
            "127.0.0.1",
            "10.0.2.0/24",
            "0.0.0.0/0",
            "::1",
            "2001:db8::/32",
            "192.168.1.1/32",
        ] {
            assert!(Network::parse(good).is_some(), "{good}");
        }
        for bad in [
            "bad_IP",
            "10.0.2.1/24",
            "10.0.2.0/33",
            "10.0.2.0/",
            "10.0.2.0/+8",
            "2001:db8::1/32",
            "",
            "localhost",
            "1.2.3.4.5",
        ] {
            assert!(Network::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn membership() {
        let network = Network::parse("10.0.2.0/24").expect("valid");
        assert!(network.contains(ip("10.0.2.200")));
        assert!(!network.contains(ip("10.0.3.1")));
        assert!(network.contains(ip("::ffff:10.0.2.7")));
        let host = Network::parse("127.0.0.1").expect("valid");
        assert!(host.contains(ip("127.0.0.1")));
        assert!(!host.contains(ip("127.0.0.2")));
        let everything = Network::parse("0.0.0.0/0").expect("valid");
        assert!(everything.contains(ip("8.8.8.8")));
        assert!(!everything.contains(ip("::2")));
        let six = Network::parse("2001:db8::/32").expect("valid");
        assert!(six.contains(ip("2001:db8:1::5")));
        assert!(!six.contains(ip("2001:db9::5")));
        assert_eq!(parse_all(&["127.0.0.1", "bad_IP"]), Err("bad_IP"));
    }
}
