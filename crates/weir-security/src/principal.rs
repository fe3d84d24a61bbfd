//! Principals of TLS clients, as Kafka builds them: a client certificate's subject name
//! in RFC 2253 form (`CN=alice,OU=eng,O=Example`, as Java's `X500Principal.getName()`
//! prints it), passed through `ssl.principal.mapping.rules`, becomes `User:<name>`.
//!
//! x509-cert parses the certificate; the string is written here because it must be the
//! one Kafka writes, byte for byte, for ACLs and quotas to name the same principal on
//! both: RDNs last to first, Java's keywords for the attributes it knows (others as the
//! dotted OID and `#` with the value's DER in hex), RFC 2253's escapes.

use regex::Regex;
use x509_cert::der::{Decode, Encode, Tag, Tagged};
use x509_cert::Certificate;

/// The attribute keywords Java's RFC 2253 form uses.
const KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// The subject of a DER certificate, as RFC 2253 names it.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, String> {
    let cert = Certificate::from_der(cert_der).map_err(|e| format!("a bad certificate: {e}"))?;
    let mut rdns = Vec::new();
    for rdn in cert.tbs_certificate.subject.0.iter().rev() {
        let mut parts = Vec::new();
        for atv in rdn.0.iter() {
            let oid = atv.oid.to_string();
            let keyword = KEYWORDS.iter().find(|(o, _)| *o == oid).map(|(_, k)| *k);
            let text = text_of(atv.value.tag(), atv.value.value());
            parts.push(match (keyword, text) {
                (Some(k), Some(t)) => format!("{k}={}", escape(&t)),
                // Unknown attributes, and values with no string form: the DER in hex.
                (k, _) => {
                    let der = atv.value.to_der().map_err(|e| e.to_string())?;
                    let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
                    format!("{}=#{hex}", k.map_or(oid.clone(), str::to_string))
                }
            });
        }
        rdns.push(parts.join("+"));
    }
    Ok(rdns.join(","))
}

/// The subject alternative names of a DER certificate, as Java's
/// `X509Certificate.getSubjectAlternativeNames()` lists them: `[type, value]`, with the
/// type's number (2 a DNS name, 7 an IP address, ...); none if it has no such extension.
pub fn subject_alt_names(cert_der: &[u8]) -> Result<std::collections::BTreeSet<String>, String> {
    use x509_cert::der::oid::AssociatedOid;
    use x509_cert::ext::pkix::name::GeneralName;
    use x509_cert::ext::pkix::SubjectAltName;
    let cert = Certificate::from_der(cert_der).map_err(|e| format!("a bad certificate: {e}"))?;
    let mut names = std::collections::BTreeSet::new();
    let extensions = cert.tbs_certificate.extensions.unwrap_or_default();
    let Some(ext) = extensions.iter().find(|e| e.extn_id == SubjectAltName::OID) else {
        return Ok(names);
    };
    let san = SubjectAltName::from_der(ext.extn_value.as_bytes())
        .map_err(|e| format!("a bad subjectAltName: {e}"))?;
    for name in san.0 {
        let (kind, value) = match name {
            GeneralName::Rfc822Name(v) => (1, v.to_string()),
            GeneralName::DnsName(v) => (2, v.to_string()),
            GeneralName::UniformResourceIdentifier(v) => (6, v.to_string()),
            GeneralName::IpAddress(v) => (
                7,
                match v.as_bytes() {
                    b if b.len() == 4 => {
                        std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string()
                    }
                    // Java writes each of the eight groups, unshortened.
                    b if b.len() == 16 => b
                        .chunks(2)
                        .map(|g| format!("{:x}", u16::from_be_bytes([g[0], g[1]])))
                        .collect::<Vec<_>>()
                        .join(":"),
                    b => b.iter().map(|x| format!("{x:02x}")).collect(),
                },
            ),
            GeneralName::RegisteredId(oid) => (8, oid.to_string()),
            other => {
                // otherName, directoryName, ediPartyName: their DER, which no two
                // certificates share by accident.
                let der = other.to_der().map_err(|e| e.to_string())?;
                (0, der.iter().map(|b| format!("{b:02x}")).collect())
            }
        };
        names.insert(format!("[{kind}, {value}]"));
    }
    Ok(names)
}

/// A directory string's text, for the string types certificates use.
fn text_of(tag: Tag, bytes: &[u8]) -> Option<String> {
    match tag {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::TeletexString => {
            String::from_utf8(bytes.to_vec()).ok()
        }
        Tag::BmpString => {
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253's escapes: a backslash before `,+"\<>;=`, a leading `#` or space, and a
/// trailing space.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One of `ssl.principal.mapping.rules`.
#[derive(Debug, Clone)]
enum Rule {
    /// The name is the whole DN.
    Default,
    /// When the whole DN matches, the name is the replacement (`$1` for a group), then
    /// lower- or upper-cased if asked.
    Map {
        pattern: Regex,
        replacement: String,
        case: Option<char>,
    },
}

/// Kafka's `ssl.principal.mapping.rules`: rules tried in order, the first that matches
/// naming the principal. A DN no rule matches is refused, as in Kafka.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl PrincipalMapper {
    /// Parses the setting: `DEFAULT` and `RULE:pattern/replacement/[L|U]`, separated by
    /// commas or new lines. A pattern may hold commas (`^CN=(.*?),OU=ops$`) and escaped
    /// slashes (`\/`).
    pub fn parse(value: &str) -> Result<PrincipalMapper, String> {
        let mut rules = Vec::new();
        let mut rest = value.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| format!("ssl.principal.mapping.rules: '{rest}' has no '/'"))?;
                let (replacement, after) = until_slash(after).ok_or_else(|| {
                    format!("ssl.principal.mapping.rules: '{rest}' needs pattern/replacement/")
                })?;
                let (case, after) = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &after[1..]),
                    _ => (None, after),
                };
                let anchored = format!("^(?:{pattern})$");
                let pattern = Regex::new(&anchored).map_err(|e| {
                    format!("ssl.principal.mapping.rules: pattern '{pattern}': {e}")
                })?;
                rules.push(Rule::Map {
                    pattern,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "ssl.principal.mapping.rules: '{rest}' is not DEFAULT or \
                     RULE:pattern/replacement/[LU]"
                ));
            }
            rest = rest.trim_start();
            rest = rest
                .strip_prefix(',')
                .or_else(|| rest.strip_prefix('\n'))
                .unwrap_or(rest)
                .trim_start();
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalMapper { rules })
    }

    /// The principal's name for a DN, or why there is none.
    pub fn name(&self, dn: &str) -> Result<String, String> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Map {
                    pattern,
                    replacement,
                    case,
                } if pattern.is_match(dn) => {
                    let name = pattern.replace(dn, replacement.as_str()).into_owned();
                    let name = match case {
                        Some('L') => name.to_lowercase(),
                        Some('U') => name.to_uppercase(),
                        _ => name,
                    };
                    if name.is_empty() {
                        return Err(format!("the rule for '{dn}' maps it to an empty name"));
                    }
                    return Ok(name);
                }
                Rule::Map { .. } => {}
            }
        }
        Err(format!(
            "no ssl.principal.mapping.rules rule matches '{dn}'"
        ))
    }
}

/// Up to the next unescaped `/`: (the part with `\/` unescaped, what follows the slash).
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// Java's replacement syntax (`$1`, `\$`) in the regex crate's (`${1}`, `$$`).
fn java_replacement(r: &str) -> String {
    let mut out = String::new();
    let mut chars = r.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(o) => out.push(o),
                None => {}
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                out.push_str(&format!("${{{digits}}}"));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_map_names_as_kafka_s_do() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),\
             ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT",
        )
        .unwrap();
        let n = |dn: &str| m.name(dn).unwrap();
        assert_eq!(
            n("CN=kafka-server,OU=ServiceUsers,O=Org,C=US"),
            "kafka-server"
        );
        assert_eq!(
            n("CN=Duke,OU=JavaSoft,O=Sun,L=Cupertino,ST=CA,C=US"),
            "duke@javasoft"
        );
        assert_eq!(n("OU=JavaSoft,O=Sun,cn=duke,C=US"), "DUKE");
        assert_eq!(n("OU=JavaSoft,O=Sun,C=US"), "OU=JavaSoft,O=Sun,C=US");
        let strict = PrincipalMapper::parse("RULE:^CN=([a-z]+),O=Weir$/$1/").unwrap();
        assert_eq!(strict.name("CN=alice,O=Weir").unwrap(), "alice");
        assert!(strict
            .name("CN=alice,O=Other")
            .unwrap_err()
            .contains("no ssl.principal"));
        assert_eq!(
            PrincipalMapper::default().name("CN=a,O=b").unwrap(),
            "CN=a,O=b"
        );
        assert!(PrincipalMapper::parse("RULE:^CN=(.*$/$1/").is_err());
        assert!(PrincipalMapper::parse("NONSENSE").is_err());
        let slash = PrincipalMapper::parse(r"RULE:^CN=a\/b$/ab/").unwrap();
        assert_eq!(slash.name("CN=a/b").unwrap(), "ab");
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("Acme, Inc."), r"Acme\, Inc.");
        assert_eq!(escape("#1 "), r"\#1\ ");
        assert_eq!(escape("a+b=c"), r"a\+b\=c");
    }
}
