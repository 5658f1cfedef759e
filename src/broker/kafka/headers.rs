//! A Kafka record's headers, for every reader of deltaship's topics (rebuild, the resume's
//! tail, the lookup of doubtful records).

use rdkafka::message::BorrowedMessage;

/// The record's headers as (name, value); headers with a null value are left out.
/// rdkafka's own `rdkafka::message::Headers::iter` panics on a name that is not UTF-8, which a hostile
/// producer can write: read them through librdkafka's C API instead.
#[allow(unsafe_code)]
pub fn headers<'m>(m: &'m BorrowedMessage<'_>) -> Vec<(&'m [u8], &'m [u8])> {
    use rdkafka::bindings as rd;
    use rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR as OK;
    let mut hdrs = std::ptr::null_mut();
    // SAFETY: `m.ptr()` is the consumer's message, valid while `m` is; its headers, and the
    // names and values they point to, live as long as the message (librdkafka's
    // rd_kafka_message_headers and rd_kafka_header_get_all); a name is NUL-terminated.
    unsafe {
        if rd::rd_kafka_message_headers(m.ptr(), &mut hdrs) != OK {
            return Vec::new();
        }
        (0..rd::rd_kafka_header_cnt(hdrs))
            .filter_map(|i| {
                let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0);
                if rd::rd_kafka_header_get_all(hdrs, i, &mut name, &mut value, &mut size) != OK || value.is_null() {
                    return None;
                }
                Some((std::ffi::CStr::from_ptr(name).to_bytes(), std::slice::from_raw_parts(value.cast::<u8>(), size)))
            })
            .collect()
    }
}
