//! Where a keyed record goes: the partition the producer's `murmur2_random` partitioner
//! (Kafka's Java client's default, set in `config::kafka`) picks, so that each copy of a
//! marker can carry the count and digest of its own partition's objects.

use bytes::Bytes;

use crate::event::Envelope;
use crate::model::digest::StateSum;

/// Kafka's murmur2 of `key` (the Java client's `Utils.murmur2`, librdkafka's `rd_murmur2`).
fn murmur2(key: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ key.len() as u32;
    let mut chunks = key.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().expect("four bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// The partition of `key` among `partitions` partitions.
pub fn partition_of(key: &str, partitions: usize) -> i32 {
    ((murmur2(key.as_bytes()) & 0x7fff_ffff) as usize % partitions.max(1)) as i32
}

/// The marker `env` as its copy for partition `p` of `partitions` carries it: its `state`
/// counts only the objects whose records live in `p`. Other events, and markers without a
/// state, are sent as they are.
pub fn for_partition(env: &Envelope, p: i32, partitions: usize) -> Option<Envelope> {
    let terms = env.state.as_ref()?;
    let sum: StateSum = terms.iter().filter(|(key, _)| partition_of(key, partitions) == p).map(|(_, t)| *t).collect();
    let mut data: serde_json::Value = serde_json::from_slice(&env.data).ok()?;
    data["state"] = sum.to_json();
    let data = Bytes::from(serde_json::to_vec(&data).expect("marker data serializes"));
    Some(Envelope { data, state: None, ..env.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's own `UtilsTest.testMurmur2` (the Java client's values).
    #[test]
    fn murmur2_is_kafkas() {
        for (key, java) in [
            ("21", -973932308i32),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            ("abc", 479470107),
        ] {
            assert_eq!(murmur2(key.as_bytes()) as i32, java, "{key}");
        }
    }
}
