//! Redis Cluster's key slots: which part of a key is hashed, and the slot it lands in.

/// The number of slots of a cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The part of a key Redis Cluster hashes: the content of its first `{…}` when non-empty,
/// else the whole key.
pub(crate) fn hashed_part(key: &str) -> &str {
    // The braces are ASCII: the range's ends are character boundaries.
    tag(key.as_bytes()).map_or(key, |range| &key[range])
}

/// Where a key's hash tag lies: the content of its first `{…}`, when non-empty.
fn tag(key: &[u8]) -> Option<std::ops::Range<usize>> {
    let open = key.iter().position(|&b| b == b'{')? + 1;
    let len = key[open..].iter().position(|&b| b == b'}')?;
    (len > 0).then_some(open..open + len)
}

/// The slot of `key`: CRC16 (XMODEM) of its hashed part, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    slot_of(key.as_bytes())
}

/// [`slot`] of a key as bytes (a command's argument), hashed as [`hashed_part`] says.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    crc16(tag(key).map_or(key, |range| &key[range])) % SLOTS
}

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // The check value given in the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // Values from the Redis Cluster specification (the cluster tests check more keys
        // against `CLUSTER KEYSLOT`).
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_eq!(hashed_part("{user:1}:cart"), "user:1");
        assert_eq!(hashed_part("a{}b{c}"), "a{}b{c}");
    }
}
