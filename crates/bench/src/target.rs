//! What the tool measures: targets given as URLs.
//!
//! | URL | target |
//! | --- | --- |
//! | `http://HOST:PORT/v1/fn/NAME` | a netaccel node's HTTP front end, function `NAME` |
//! | `http://HOST:PORT/any/path` | any HTTP/1.1 server |
//! | `rac://HOST:PORT/NAME` | a netaccel node's RAC v1 listener, accelerator `NAME` (or a numeric id) |
//! | `tcp-echo://HOST:PORT` | a TCP echo server: the payload goes out and the same bytes come back |
//! | `inproc://NAME` | the built-in kernel `NAME` called in this process, no network: the compute floor |

use anyhow::{bail, Context, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Http {
        /// `HOST:PORT` to connect to.
        addr: String,
        /// Value of the `Host` header.
        host: String,
        /// Path and query, starting with `/`.
        path: String,
        /// The netaccel function when the path is `/v1/fn/NAME`.
        function: Option<String>,
    },
    Rac {
        addr: String,
        accel_id: u16,
        name: String,
    },
    TcpEcho {
        addr: String,
    },
    InProcess {
        name: String,
    },
}

impl Target {
    pub fn parse(url: &str) -> Result<Target> {
        let (scheme, rest) = url
            .split_once("://")
            .with_context(|| format!("{url}: expected SCHEME://…"))?;
        match scheme {
            "http" => {
                let (authority, path) = match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, "/"),
                };
                let addr = with_port(authority, 80)?;
                let function = path
                    .split('?')
                    .next()
                    .and_then(|p| p.strip_prefix("/v1/fn/"))
                    .filter(|name| !name.is_empty() && !name.contains('/'))
                    .map(str::to_owned);
                Ok(Target::Http {
                    addr,
                    host: authority.to_owned(),
                    path: path.to_owned(),
                    function,
                })
            }
            "rac" => {
                let (authority, name) = rest
                    .split_once('/')
                    .with_context(|| format!("{url}: expected rac://HOST:PORT/NAME"))?;
                let accel_id = match rac_proto::builtin::id(name) {
                    Some(id) => id,
                    None => name.parse::<u16>().with_context(|| {
                        format!("{url}: {name:?} is neither a built-in accelerator nor an id")
                    })?,
                };
                Ok(Target::Rac {
                    addr: with_port(authority, rac_proto::DEFAULT_PORT)?,
                    accel_id,
                    name: name.to_owned(),
                })
            }
            "tcp-echo" => Ok(Target::TcpEcho {
                addr: with_port(rest.trim_end_matches('/'), 7)?,
            }),
            "inproc" => {
                if accel::Catalog::builtin().by_name(rest).is_none() {
                    bail!("{url}: {rest:?} is not a built-in accelerator");
                }
                Ok(Target::InProcess {
                    name: rest.to_owned(),
                })
            }
            "https" => bail!("{url}: TLS is not supported"),
            _ => bail!("{url}: unknown scheme {scheme:?} (http, rac, tcp-echo, inproc)"),
        }
    }

    /// Whether results carry the node's queue and execution times.
    pub fn reports_server_split(&self) -> bool {
        matches!(
            self,
            Target::Rac { .. }
                | Target::Http {
                    function: Some(_),
                    ..
                }
        )
    }

    /// Whether the payload is upper-cased (or echoed) on the way back, so that its
    /// content matters: `to_uppercase` wants lower-case letters.
    pub fn function_name(&self) -> Option<&str> {
        match self {
            Target::Http { function, .. } => function.as_deref(),
            Target::Rac { name, .. } | Target::InProcess { name } => Some(name),
            Target::TcpEcho { .. } => None,
        }
    }
}

fn with_port(authority: &str, default_port: u16) -> Result<String> {
    if authority.is_empty() {
        bail!("missing host");
    }
    let has_port = match authority.rfind(':') {
        Some(i) => !authority.ends_with(']') && authority[i + 1..].parse::<u16>().is_ok(),
        None => false,
    };
    Ok(if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_scheme() {
        assert_eq!(
            Target::parse("http://127.0.0.1:8080/v1/fn/to_uppercase").unwrap(),
            Target::Http {
                addr: "127.0.0.1:8080".into(),
                host: "127.0.0.1:8080".into(),
                path: "/v1/fn/to_uppercase".into(),
                function: Some("to_uppercase".into()),
            }
        );
        let plain = Target::parse("http://localhost/health").unwrap();
        assert!(!plain.reports_server_split());
        assert!(
            matches!(plain, Target::Http { ref addr, function: None, .. } if addr == "localhost:80")
        );
        assert_eq!(
            Target::parse("rac://127.0.0.1:9400/to_uppercase").unwrap(),
            Target::Rac {
                addr: "127.0.0.1:9400".into(),
                accel_id: 2,
                name: "to_uppercase".into()
            }
        );
        assert!(matches!(
            Target::parse("rac://h/300").unwrap(),
            Target::Rac { accel_id: 300, ref addr, .. } if addr == "h:9400"
        ));
        assert_eq!(
            Target::parse("tcp-echo://127.0.0.1:7000").unwrap(),
            Target::TcpEcho {
                addr: "127.0.0.1:7000".into()
            }
        );
        assert!(matches!(
            Target::parse("inproc://to_uppercase").unwrap(),
            Target::InProcess { .. }
        ));
    }

    #[test]
    fn refuses_what_it_cannot_measure() {
        for bad in [
            "127.0.0.1:80",
            "https://x/",
            "ftp://x/",
            "rac://h:1",
            "rac://h:1/nope",
            "inproc://nope",
            "http:///x",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
