//! The names a client certificate presents, for mapping it to a tenant.
//!
//! rustls has already verified the chain against the configured client CA when these
//! are read; this only says who the certificate names. The subject alternative names
//! come from webpki (rustls's own certificate parser); the subject's common name is not
//! exposed there, so it is read here from the subject's DER with a small pure parser
//! over the bytes (one walk over the relative distinguished names, nothing else).

use rustls::pki_types::CertificateDer;

/// The OID of the common name attribute (2.5.4.3), DER-encoded.
const COMMON_NAME_OID: &[u8] = &[0x55, 0x04, 0x03];
/// Bound on attributes walked in one subject: a real subject has a handful.
const ATTRIBUTES_MAX: usize = 64;

/// The certificate's names, in the order they are matched against the configured
/// subjects: each common name of its subject, then its DNS and URI alternative names.
pub fn names(cert: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let ee = webpki::EndEntityCert::try_from(cert)
        .map_err(|e| format!("cannot read the client certificate: {e:?}"))?;
    let mut names = common_names(ee.subject());
    names.extend(ee.valid_dns_names().map(str::to_owned));
    names.extend(ee.valid_uri_names().map(str::to_owned));
    Ok(names)
}

/// The common names in a subject (the contents of its `Name` SEQUENCE: a sequence of
/// SETs of `AttributeTypeAndValue` SEQUENCEs). Malformed parts end the walk: what was
/// read before them stands, nothing is guessed.
pub fn common_names(subject: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut rdns = subject;
    let mut walked = 0;
    while let Some((0x31, mut set, rest)) = tlv(rdns) {
        rdns = rest;
        while let Some((0x30, attribute, more)) = tlv(set) {
            set = more;
            walked += 1;
            if walked > ATTRIBUTES_MAX {
                return names;
            }
            let Some((0x06, oid, value)) = tlv(attribute) else {
                continue;
            };
            if oid != COMMON_NAME_OID {
                continue;
            }
            // UTF8String, PrintableString, IA5String: all UTF-8 on the wire.
            if let Some((0x0c | 0x13 | 0x16, text, _)) = tlv(value) {
                if let Ok(text) = std::str::from_utf8(text) {
                    names.push(text.to_owned());
                }
            }
        }
    }
    names
}

/// One DER element with a one-byte tag: `(tag, contents, rest)`, or `None` when the
/// input is too short or its length form is not DER's (at most four length bytes).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[count..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, sans: &[&str]) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "netaccel tests");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn common_name_then_alternative_names() {
        let c = cert("alice", &["alice.clients.example", "bob.example"]);
        assert_eq!(
            names(&c).unwrap(),
            ["alice", "alice.clients.example", "bob.example"]
        );
    }

    #[test]
    fn a_subject_without_common_name_has_only_its_alternative_names() {
        let mut params = rcgen::CertificateParams::new(vec!["svc.example".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "only an org");
        let key = rcgen::KeyPair::generate().unwrap();
        let c = params.self_signed(&key).unwrap().der().clone();
        assert_eq!(names(&c).unwrap(), ["svc.example"]);
    }

    #[test]
    fn truncated_or_malformed_subjects_yield_what_was_whole() {
        // SET { SEQ { OID 2.5.4.3, UTF8String "ab" } }
        let good = [
            0x31, 0x0b, 0x30, 0x09, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x02, b'a', b'b',
        ];
        assert_eq!(common_names(&good), ["ab"]);
        for cut in 0..good.len() {
            assert!(common_names(&good[..cut]).is_empty(), "cut at {cut}");
        }
        // A length longer than the input, an indefinite length, five length bytes.
        for bad in [
            &[0x31, 0x7f, 0x30][..],
            &[0x31, 0x80, 0x00, 0x00],
            &[0x31, 0x85, 1, 1, 1, 1, 1],
        ] {
            assert!(common_names(bad).is_empty());
        }
        // Long-form lengths are read.
        let mut long = vec![0x31, 0x81, 0x0b];
        long.extend_from_slice(&good[2..]);
        assert_eq!(common_names(&long), ["ab"]);
        assert!(names(&CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])).is_err());
    }
}
