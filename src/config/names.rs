//! Kubernetes' rules for names: DNS labels and subdomains.

/// A DNS label (RFC 1123): at most 63 lowercase letters, digits and `-`, not at an end.
pub(super) fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') && !s.starts_with('-') && !s.ends_with('-')
}

/// A DNS subdomain: dot-separated DNS labels, at most 253 characters.
pub(super) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}
