use super::*;

fn config(toml: &str) -> Result<RegistrySection, String> {
    crate::Config::from_toml(toml).map(|c| c.registry_section())
}

#[test]
fn urls_parse_and_know_whether_they_are_local() {
    let urls = parse_urls(
        "http://127.0.0.1:7400/, https://reg.example:443/prefix,http://[::1]:1,http://localhost",
    )
    .unwrap();
    let bases: Vec<_> = urls.iter().map(|e| (e.base.as_str(), e.loopback)).collect();
    assert_eq!(
        bases,
        [
            ("http://127.0.0.1:7400", true),
            ("https://reg.example:443/prefix", false),
            ("http://[::1]:1", true),
            ("http://localhost", true),
        ]
    );
    for bad in [
        "127.0.0.1:7400",
        "ftp://x",
        "http://",
        "http://a b",
        "http://x/?q",
        "http:///path",
    ] {
        assert!(parse_urls(bad).is_err(), "{bad}");
    }
    let many = ["http://r:1"; REGISTRY_URLS_MAX + 1].join(",");
    assert!(parse_urls(&many).unwrap_err().contains("at most"));
}

#[test]
fn names_are_what_the_registry_takes() {
    check_name("n", "node-a.rack_1").unwrap();
    for bad in [
        "",
        "a b",
        "a/b",
        "é",
        &"x".repeat(registry_api::NAME_BYTES_MAX + 1),
    ] {
        assert!(check_name("n", bad).is_err(), "{bad:?}");
    }
    let c = config("registry = \"http://127.0.0.1:7400\"").unwrap();
    assert_eq!(node_name(&c).unwrap(), hostname().unwrap());
    let err = config("registry = \"http://127.0.0.1:7400\"\nname = \"a/b\"").unwrap_err();
    assert!(err.contains("only letters"), "{err}");
}

#[test]
fn registry_keys_without_a_registry_are_refused() {
    for key in [
        "name = \"a\"",
        "advertise = \"10.0.0.1\"",
        "registry_token = \"t\"",
    ] {
        let err = config(key).unwrap_err();
        assert!(err.contains("but registry is not"), "{key}: {err}");
    }
    let err = config("registry = \"http://127.0.0.1:1\"\nregistry_token = \"a b\"").unwrap_err();
    assert!(err.contains("registry_token must be"), "{err}");
    let err =
        config("registry = \"http://127.0.0.1:1\"\nregistry_timeout_ms = 600001").unwrap_err();
    assert!(err.contains("at most 600000"), "{err}");
}

#[test]
fn the_advertised_ip_defaults_to_the_listen_ip_when_others_can_use_it() {
    let ip = |toml: &str| {
        let c = config(&format!("registry = \"http://10.0.0.9:7400\"\n{toml}"))?;
        advertise_ip(&c, &parse_urls(c.registry.as_deref().unwrap())?)
    };
    // One specific address: that one.
    assert_eq!(
        ip("http = \"10.0.0.5:8080\"\nrac = \"10.0.0.5:9400\""),
        Ok("10.0.0.5".parse().unwrap())
    );
    // The other front ends on every address: still the HTTP one.
    assert_eq!(
        ip("http = \"10.0.0.5:8080\"\nrac = \"0.0.0.0:9400\""),
        Ok("10.0.0.5".parse().unwrap())
    );
    // Every address: which one is for the operator to say.
    let err = ip("http = \"0.0.0.0:8080\"").unwrap_err();
    assert!(err.contains("set advertise"), "{err}");
    assert_eq!(
        ip("http = \"0.0.0.0:8080\"\nadvertise = \"192.168.1.4\""),
        Ok("192.168.1.4".parse().unwrap())
    );
    assert!(ip("advertise = \"0.0.0.0\"")
        .unwrap_err()
        .contains("not an address"));
    // Different addresses per front end: ambiguous.
    let err = ip("http = \"10.0.0.5:8080\"\nrac = \"10.0.0.6:9400\"").unwrap_err();
    assert!(err.contains("different IPs"), "{err}");
    // Loopback (the default listen address): only with a registry on this host.
    let err = ip("").unwrap_err();
    assert!(err.contains("loopback"), "{err}");
    let local = config("registry = \"http://localhost:7400\"").unwrap();
    assert_eq!(
        advertise_ip(&local, &parse_urls("http://localhost:7400").unwrap()),
        Ok("127.0.0.1".parse().unwrap())
    );
}

#[test]
fn advertised_addresses_keep_each_listeners_port() {
    let listening = Advertised {
        opencl: Some("[::]:9500".parse().unwrap()),
        https: Some("0.0.0.0:8443".parse().unwrap()),
        rac_tls: Some("10.1.2.3:9443".parse().unwrap()),
        grpc: Some("127.0.0.1:8001".parse().unwrap()),
        grpc_tls: Some("[::]:8002".parse().unwrap()),
        ..Advertised::listening(
            "0.0.0.0:8080".parse().unwrap(),
            "127.0.0.1:9400".parse().unwrap(),
        )
    };
    let a = listening.at("10.1.2.3".parse().unwrap());
    assert_eq!(a.http.to_string(), "10.1.2.3:8080");
    assert_eq!(a.rac.to_string(), "10.1.2.3:9400");
    assert_eq!(a.opencl.unwrap().to_string(), "10.1.2.3:9500");
    assert_eq!(a.https.unwrap().to_string(), "10.1.2.3:8443");
    assert_eq!(a.rac_tls.unwrap().to_string(), "10.1.2.3:9443");
    assert_eq!(a.grpc_tls.unwrap().to_string(), "10.1.2.3:8002");
    // gRPC on loopback (its default) cannot be reached at 10.1.2.3: left out.
    assert_eq!(a.grpc, None);
    // A node advertised on loopback (a trial on one host) advertises it.
    let local = listening.at("127.0.0.1".parse().unwrap());
    assert_eq!(local.grpc.unwrap().to_string(), "127.0.0.1:8001");
    // Nothing configured: nothing advertised.
    let plain = Advertised::listening(
        "127.0.0.1:8080".parse().unwrap(),
        "127.0.0.1:9400".parse().unwrap(),
    )
    .at("127.0.0.1".parse().unwrap());
    assert_eq!((plain.https, plain.grpc_tls), (None, None));
}

#[test]
fn location_gives_the_leaders_origin() {
    assert_eq!(
        origin_of("http://10.0.0.2:7400/v1/nodes/a").as_deref(),
        Some("http://10.0.0.2:7400")
    );
    assert_eq!(origin_of("https://r:1").as_deref(), Some("https://r:1"));
    assert_eq!(origin_of("/v1/nodes/a"), None);
}

fn info(id: u16, busy_ns: u64, busy_ratio: f64) -> SlotInfo {
    SlotInfo {
        id,
        device: "cpu0".into(),
        backend: crate::config::BackendKind::Cpu,
        accelerator: "echo".into(),
        accel_id: 1,
        reconfiguring_to: None,
        failed: None,
        running: false,
        queue_depth: 0,
        busy_ratio,
        busy_ns,
    }
}

#[test]
fn busy_ratios_cover_the_time_since_the_last_report() {
    let mut s = BusySampler::new();
    let t0 = Instant::now();
    // Before the first report: the ratio since start-up.
    assert_eq!(s.ratios(&[info(0, 5, 0.25)], t0), [0.25]);
    s.taken(&[info(0, 1_000_000, 0.25)], t0);
    let t1 = t0 + Duration::from_millis(10);
    // 5 ms busy out of 10: one half, whatever the lifetime ratio says.
    let r = s.ratios(&[info(0, 6_000_000, 0.9)], t1);
    assert!((r[0] - 0.5).abs() < 1e-9, "{r:?}");
    // Idle since: zero. A call longer than the interval: at most one.
    assert_eq!(s.ratios(&[info(0, 1_000_000, 0.9)], t1), [0.0]);
    assert_eq!(s.ratios(&[info(0, 900_000_000, 0.9)], t1), [1.0]);
}
