use super::*;

fn access(toml_text: Option<&str>, admin: Option<&str>) -> Result<Access, String> {
    let file = toml_text
        .map(|t| toml::from_str::<CredentialsFile>(t).map_err(|e| e.to_string()))
        .transpose()?;
    let dir = directory(file.as_ref(), admin, 1)?;
    Ok(Access {
        path: None,
        directory: RwLock::new(Arc::new(dir)),
        cache: VerdictCache::new(VERDICTS_MAX),
        budget: CheckBudget::new(TOKEN_CHECK_BUDGET),
        audit_second: AtomicU64::new(0),
        audit_written: AtomicU64::new(0),
        audit_suppressed: AtomicU64::new(0),
    })
}

fn bearer(t: &str) -> Vec<u8> {
    format!("Bearer {t}").into_bytes()
}

/// The status `token` (None: no header) gets for `method path`: 0 when allowed.
fn status(a: &Access, token: Option<&str>, method: &str, path: &str) -> u16 {
    let header = token.map(bearer);
    let caller = match a.identify(header.as_deref()) {
        Ok(c) => c,
        Err(e) => return e.status,
    };
    match a.authorize(&caller, &Need::of(method, path)) {
        Ok(()) => 0,
        Err(e) => e.status,
    }
}

const FILE: &str = r#"
anonymous = "refuse"
[[principal]]
name = "ops"
role = "admin"
token = "t-ops"
[[principal]]
name = "prom"
role = "reader"
token = "t-prom"
[[principal]]
name = "node-a"
role = "node"
token = "t-node-a"
[[principal]]
name = "rack-1"
role = "node"
token = "t-rack"
nodes = ["rack-1-*"]
[[principal]]
name = "team-a"
role = "client"
token = "t-team-a"
functions = ["team-a-*"]
"#;

#[test]
fn routes_are_classified_by_method_and_path() {
    let cases = [
        ("GET", "/health", Need::Nothing),
        ("GET", "/", Need::ReadCluster),
        ("GET", "/metrics", Need::ReadCluster),
        ("GET", "/v1/nodes", Need::ReadCluster),
        ("GET", "/v1/snapshot", Need::ReadCluster),
        ("GET", "/v1/functions", Need::ReadCluster),
        ("GET", "/v1/functions/f", Need::ReadFunction("f".into())),
        (
            "GET",
            "/v1/functions/f/instances/i",
            Need::ReadFunction("f".into()),
        ),
        ("POST", "/v1/fn/echo", Need::Resolve),
        ("GET", "/v1/fn/echo", Need::Resolve),
        ("PUT", "/v1/nodes/n1", Need::WriteNode("n1".into())),
        ("DELETE", "/v1/nodes/n1", Need::WriteNode("n1".into())),
        (
            "PUT",
            "/v1/functions/f",
            Need::WriteFunction(Some("f".into())),
        ),
        (
            "POST",
            "/v1/functions/f/instances",
            Need::WriteInstance("f".into()),
        ),
        (
            "DELETE",
            "/v1/functions/f/instances/i",
            Need::WriteInstance("f".into()),
        ),
        ("POST", "/v1/reconfigurations", Need::Reconfigure),
        ("POST", "/health", Need::WriteFunction(None)),
        ("PATCH", "/v1/anything/else", Need::WriteFunction(None)),
    ];
    for (method, path, want) in cases {
        assert_eq!(Need::of(method, path), want, "{method} {path}");
    }
}

#[test]
fn without_a_file_the_rules_are_as_they_were() {
    // No token at all: everyone may do everything, a token is ignored.
    let open = access(None, None).unwrap();
    for (m, p) in [
        ("PUT", "/v1/nodes/n"),
        ("PUT", "/v1/functions/f"),
        ("GET", "/"),
    ] {
        assert_eq!(status(&open, None, m, p), 0);
        assert_eq!(status(&open, Some("anything"), m, p), 0);
    }
    // An admin token: writes need it, reads, the resolver and reconfiguration
    // requests do not; a wrong one is refused everywhere.
    let a = access(None, Some("adm")).unwrap();
    assert_eq!(status(&a, None, "PUT", "/v1/nodes/n"), 401);
    assert_eq!(
        status(&a, None, "DELETE", "/v1/functions/f/instances/i"),
        401
    );
    assert_eq!(status(&a, None, "GET", "/v1/nodes"), 0);
    assert_eq!(status(&a, None, "POST", "/v1/fn/echo"), 0);
    assert_eq!(status(&a, None, "POST", "/v1/reconfigurations"), 0);
    assert_eq!(status(&a, Some("adm"), "PUT", "/v1/nodes/n"), 0);
    assert_eq!(status(&a, Some("wrong"), "GET", "/v1/nodes"), 401);
    let caller = a.identify(Some(&bearer("adm"))).unwrap();
    assert!(caller.may_force_on("any"));
    assert!(!a.identify(None).unwrap().may_force_on("any"));
}

#[test]
fn each_role_may_do_its_part_and_no_more() {
    let a = access(Some(FILE), Some("legacy")).unwrap();
    // Anonymous under "refuse": only the health check.
    assert_eq!(status(&a, None, "GET", "/health"), 0);
    for (m, p) in [("GET", "/v1/nodes"), ("GET", "/"), ("POST", "/v1/fn/echo")] {
        assert_eq!(status(&a, None, m, p), 401, "{m} {p}");
    }
    // The admin (and the --token) may do all.
    for t in ["t-ops", "legacy"] {
        assert_eq!(status(&a, Some(t), "PUT", "/v1/functions/f"), 0);
        assert_eq!(status(&a, Some(t), "DELETE", "/v1/nodes/x"), 0);
    }
    // The reader reads.
    assert_eq!(status(&a, Some("t-prom"), "GET", "/metrics"), 0);
    assert_eq!(status(&a, Some("t-prom"), "GET", "/v1/functions/x"), 0);
    assert_eq!(status(&a, Some("t-prom"), "PUT", "/v1/functions/x"), 403);
    assert_eq!(
        status(&a, Some("t-prom"), "POST", "/v1/functions/x/instances"),
        403
    );
    // A node registers itself (or what its patterns name), nothing else.
    assert_eq!(status(&a, Some("t-node-a"), "PUT", "/v1/nodes/node-a"), 0);
    assert_eq!(status(&a, Some("t-node-a"), "PUT", "/v1/nodes/node-b"), 403);
    assert_eq!(status(&a, Some("t-rack"), "PUT", "/v1/nodes/rack-1-n7"), 0);
    assert_eq!(
        status(&a, Some("t-rack"), "DELETE", "/v1/nodes/rack-2-n1"),
        403
    );
    assert_eq!(
        status(&a, Some("t-node-a"), "POST", "/v1/reconfigurations"),
        0
    );
    assert_eq!(status(&a, Some("t-node-a"), "GET", "/v1/snapshot"), 403);
    assert_eq!(status(&a, Some("t-node-a"), "PUT", "/v1/functions/f"), 403);
    let node = a.identify(Some(&bearer("t-node-a"))).unwrap();
    assert!(node.may_force_on("node-a") && !node.may_force_on("node-b"));
    // A client binds and reads its functions, resolves, and no more.
    let c = Some("t-team-a");
    assert_eq!(
        status(&a, c, "POST", "/v1/functions/team-a-sobel/instances"),
        0
    );
    assert_eq!(
        status(&a, c, "GET", "/v1/functions/team-a-sobel/instances/i1"),
        0
    );
    assert_eq!(
        status(&a, c, "DELETE", "/v1/functions/team-a-sobel/instances/i1"),
        0
    );
    assert_eq!(status(&a, c, "POST", "/v1/fn/sobel"), 0);
    assert_eq!(
        status(&a, c, "POST", "/v1/functions/team-b-x/instances"),
        403
    );
    assert_eq!(status(&a, c, "GET", "/v1/functions/team-b-x"), 403);
    assert_eq!(status(&a, c, "PUT", "/v1/functions/team-a-sobel"), 403);
    assert_eq!(status(&a, c, "GET", "/v1/nodes"), 403);
    assert_eq!(status(&a, c, "PUT", "/v1/nodes/team-a"), 403);
    assert!(!a
        .identify(Some(&bearer("t-team-a")))
        .unwrap()
        .may_force_on("n"));
    // Wrong, malformed, or another scheme: 401.
    assert_eq!(status(&a, Some("t-team-b"), "GET", "/health"), 401);
    let basic = b"Basic dXNlcjpwYXNz".to_vec();
    assert_eq!(a.identify(Some(&basic)).unwrap_err().status, 401);
}

#[test]
fn anonymous_read_leaves_reads_open_and_writes_closed() {
    let text = FILE.replace("anonymous = \"refuse\"", "anonymous = \"read\"");
    let a = access(Some(&text), None).unwrap();
    assert_eq!(status(&a, None, "GET", "/v1/nodes"), 0);
    assert_eq!(status(&a, None, "POST", "/v1/fn/x"), 0);
    assert_eq!(status(&a, None, "PUT", "/v1/nodes/node-a"), 401);
    assert_eq!(status(&a, None, "POST", "/v1/reconfigurations"), 401);
    assert_eq!(status(&a, None, "POST", "/v1/functions/f/instances"), 401);
}

#[test]
fn refusals_name_what_was_refused_and_never_the_token() {
    let a = access(Some(FILE), None).unwrap();
    let caller = a.identify(Some(&bearer("t-team-a"))).unwrap();
    let e = a
        .authorize(
            &caller,
            &Need::of("POST", "/v1/functions/team-b-x/instances"),
        )
        .unwrap_err();
    assert_eq!((e.status, e.code), (403, "FORBIDDEN"));
    assert_eq!(
        e.message,
        "team-a (client) may not create or delete instances of function team-b-x"
    );
    let e = a.identify(Some(&bearer("t-guess"))).unwrap_err();
    assert!(!e.message.contains("t-guess"), "{}", e.message);
    let e = a
        .authorize(&Caller::Anonymous, &Need::ReadCluster)
        .unwrap_err();
    assert!(e.message.contains("needs a token"), "{}", e.message);
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let cases = [
        ("[[principal]]\nname='a'\nrole='admin'\n", "no token or token_hash"),
        (
            "[[principal]]\nname='a'\nrole='admin'\ntoken='x'\n[[principal]]\nname='a'\nrole='reader'\ntoken='y'\n",
            "configured twice",
        ),
        (
            "[[principal]]\nname='a'\nrole='admin'\ntoken='x'\n[[principal]]\nname='b'\nrole='reader'\ntoken='x'\n",
            "same token as principal `a`",
        ),
        ("[[principal]]\nname='a'\nrole='admin'\ntoken='adm'\n", "same token as the admin token"),
        ("[[principal]]\nname='a'\nrole='client'\ntoken='x'\nnodes=['n']\n", "role node only"),
        ("[[principal]]\nname='a'\nrole='client'\ntoken='x'\nfunctions=['a*b']\n", "not valid"),
        ("[[principal]]\nname='a b'\nrole='client'\ntoken='x'\n", "not valid"),
        ("[[principal]]\nname='a'\nrole='client'\ntoken_hash='plain'\n", "argon2"),
    ];
    for (text, want) in cases {
        let e = access(Some(text), Some("adm")).err().expect(text);
        assert!(e.contains(want), "{text}: {e}");
    }
    for text in [
        "anonymous = 'maybe'\n",
        "[[principal]]\nname='a'\nrole='root'\ntoken='x'\n",
        "[[principal]]\nname='a'\nrole='admin'\ntoken='x'\ncolour='red'\n",
    ] {
        assert!(access(Some(text), None).is_err(), "{text}");
    }
}

#[test]
fn a_hashed_token_works_and_a_reload_removes_a_token() {
    let dir = std::env::temp_dir().join(format!("netaccel-registry-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("credentials.toml");
    let phc = credential::hash_token("s3cret").unwrap();
    let write = |extra: &str| {
        std::fs::write(
            &path,
            format!("[[principal]]\nname='n'\nrole='node'\ntoken_hash='{phc}'\n{extra}"),
        )
        .unwrap()
    };
    write("[[principal]]\nname='c'\nrole='client'\ntoken='t-c'\n");
    let mut a = Access::new(Some(&path), None).unwrap();
    // Real argon2 on a loaded machine: the budget is not what this test is about.
    a.budget = CheckBudget::new(std::time::Duration::from_secs(60));
    assert_eq!(status(&a, Some("s3cret"), "PUT", "/v1/nodes/n"), 0);
    assert_eq!(status(&a, Some("t-c"), "POST", "/v1/fn/x"), 0);
    // The client's token removed: refused at its next request.
    write("");
    assert_eq!(a.reload().unwrap(), 1);
    // The node's token, whose secret did not change, is answered from the cache.
    a.budget = CheckBudget::new(std::time::Duration::ZERO);
    assert_eq!(status(&a, Some("s3cret"), "PUT", "/v1/nodes/n"), 0);
    a.budget = CheckBudget::new(std::time::Duration::from_secs(60));
    assert_eq!(status(&a, Some("t-c"), "POST", "/v1/fn/x"), 401);
    assert_eq!(status(&a, Some("s3cret"), "PUT", "/v1/nodes/n"), 0);
    // A bad file changes nothing.
    std::fs::write(&path, "[[principal]]\nname='n'\n").unwrap();
    assert!(a.reload().is_err());
    assert_eq!(status(&a, Some("s3cret"), "PUT", "/v1/nodes/n"), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn new_tokens_wait_for_the_check_budget_and_known_ones_do_not() {
    let mut a = access(Some(FILE), None).unwrap();
    assert_eq!(status(&a, Some("t-prom"), "GET", "/metrics"), 0);
    a.budget = CheckBudget::new(std::time::Duration::ZERO);
    assert_eq!(status(&a, Some("t-prom"), "GET", "/metrics"), 0);
    let e = a.identify(Some(&bearer("made-up"))).unwrap_err();
    assert_eq!((e.status, e.code), (503, "UNAVAILABLE"));
}

#[test]
fn the_nodes_tenants_are_served_to_nodes_and_admins_with_a_revision() {
    let with = |nodes: &str| format!("{FILE}\n[nodes]\n{nodes}");
    let a = access(
        Some(&with(
            "anonymous = \"refuse\"\n[[nodes.tenants]]\nname = \"team-a\"\ncall = [\"sobel\"]\n",
        )),
        None,
    )
    .unwrap();
    let doc = a.node_tenants().unwrap();
    assert_eq!(doc.tenants["tenants"][0]["name"], "team-a");
    assert_eq!(doc.tenants["anonymous"], "refuse");
    assert_eq!(doc.revision.len(), 16);
    // The same text gives the same revision (every replica, every restart); another,
    // another.
    let again = access(
        Some(&with(
            "anonymous = \"refuse\"\n[[nodes.tenants]]\nname = \"team-a\"\ncall = [\"sobel\"]\n",
        )),
        None,
    )
    .unwrap();
    assert_eq!(again.node_tenants().unwrap().revision, doc.revision);
    let other = access(Some(&with("[[nodes.tenants]]\nname = \"team-b\"\n")), None).unwrap();
    assert_ne!(other.node_tenants().unwrap().revision, doc.revision);
    // Nodes and admins read them; clients, readers and anonymous callers do not.
    assert_eq!(status(&a, Some("t-node-a"), "GET", "/v1/tenants"), 0);
    assert_eq!(status(&a, Some("t-ops"), "GET", "/v1/tenants"), 0);
    assert_eq!(status(&a, Some("t-prom"), "GET", "/v1/tenants"), 403);
    assert_eq!(status(&a, Some("t-team-a"), "GET", "/v1/tenants"), 403);
    assert_eq!(status(&a, None, "GET", "/v1/tenants"), 401);
    // Only the tenants part of a node's configuration, each tenant named.
    for (nodes, want) in [
        ("http = \"x\"\n", "holds only"),
        ("tenants = 3\n", "array of tables"),
        ("[[nodes.tenants]]\ncall = [\"x\"]\n", "has a name"),
    ] {
        let e = access(Some(&with(nodes)), None).err().expect(nodes);
        assert!(e.contains(want), "{nodes}: {e}");
    }
    assert!(access(Some(FILE), None).unwrap().node_tenants().is_none());
}
