use super::*;

fn tenant(name: &str, token: &str) -> TenantConfig {
    TenantConfig {
        name: name.to_string(),
        token: token.to_string(),
        ..TenantConfig::default()
    }
}

fn section(tenants: Vec<TenantConfig>, anonymous: Anonymous) -> AuthSection {
    AuthSection {
        token_check_budget: std::time::Duration::from_millis(100),
        tenants,
        anonymous,
        admin_token: Some("adm".to_string()),
    }
}

/// A cheap argon2 hash (the tests' parameters, not production's).
fn cheap_hash(token: &str) -> String {
    use argon2::PasswordHasher;
    let params = argon2::Params::new(8, 1, 1, None).unwrap();
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let salt = argon2::password_hash::SaltString::encode_b64(b"0123456789abcdef").unwrap();
    a.hash_password(token.as_bytes(), &salt)
        .unwrap()
        .to_string()
}

#[test]
fn new_tokens_wait_for_the_check_budget_and_known_ones_do_not() {
    let mut hashed = tenant("team-h", "");
    hashed.token_hash = Some(cheap_hash("th"));
    let mut auth = Auth::new(&section(vec![hashed], Anonymous::Connection)).unwrap();
    let base = Base::Connection(7);
    // Checked once with time to spare: remembered.
    assert_eq!(auth.identify(&base, Some("th")).unwrap().label(), "team-h");
    assert_eq!(auth.hello("team-h", Some("th")).unwrap().label(), "team-h");
    // No time left this second: a new token is "busy", a known one answered, and
    // a hello with the known token too (no argon2 check per connection).
    auth.budget = CheckBudget::new(std::time::Duration::ZERO);
    assert_eq!(
        auth.identify(&base, Some("made-up")).unwrap_err(),
        AuthError::Busy
    );
    assert_eq!(
        auth.hello("team-h", Some("made-up")).unwrap_err(),
        AuthError::Busy
    );
    assert_eq!(auth.identify(&base, Some("th")).unwrap().label(), "team-h");
    assert_eq!(auth.hello("team-h", Some("th")).unwrap().label(), "team-h");
    // A hello naming another tenant than the token's, or none, is refused.
    assert_eq!(
        auth.hello("team-x", Some("th")).unwrap_err(),
        AuthError::Hello("team-x".into())
    );
    assert!(AuthError::Busy.message().contains("try again"));
    // A reload that keeps team-h's secret keeps its token proven (no check);
    // one that changes it makes the token be checked again.
    let mut same = tenant("team-h", "");
    same.token_hash = auth.current().entries[0].secret_phc();
    auth.reload(&section(vec![same.clone()], Anonymous::Connection))
        .unwrap();
    auth.budget.set(std::time::Duration::ZERO);
    assert_eq!(auth.identify(&base, Some("th")).unwrap().label(), "team-h");
    same.token_hash = Some(cheap_hash("th2"));
    auth.reload(&section(vec![same], Anonymous::Connection))
        .unwrap();
    auth.budget.set(std::time::Duration::ZERO);
    assert_eq!(
        auth.identify(&base, Some("th")).unwrap_err(),
        AuthError::Busy
    );
}

#[test]
fn remote_opencl_is_its_own_grant() {
    let mut gpu = tenant("gpu", "tg");
    gpu.opencl = Some(true);
    let mut ops = tenant("ops", "to");
    ops.roles = Some(vec![Role::Operator]);
    let mut root = tenant("root", "tr");
    root.roles = Some(vec![Role::Admin]);
    let auth = Auth::new(&section(vec![gpu, ops, root], Anonymous::Refuse)).unwrap();
    let base = Base::Connection(5);
    let may = |token: &str| {
        auth.identify(&base, Some(token))
            .unwrap()
            .may(Action::OpenCl)
    };
    assert!(may("tg") && may("tr") && may("adm"));
    assert!(!may("to"), "operators reconfigure; they do not run kernels");
    let ops = auth.identify(&base, Some("to")).unwrap();
    assert_eq!(
        ops.refusal(Action::OpenCl),
        "tenant `ops` may not use the remote OpenCL devices: its policy does not allow it"
    );
    // Without any policy, every caller may, as before.
    let open = Auth::new(&section(vec![tenant("a", "ta")], Anonymous::Connection)).unwrap();
    assert!(open.identify(&base, None).unwrap().may(Action::OpenCl));
}

#[test]
fn anonymous_parses_its_three_forms_only() {
    let parse = |s: &str| Anonymous::try_from(s.to_string());
    assert_eq!(parse("connection"), Ok(Anonymous::Connection));
    assert_eq!(parse("refuse"), Ok(Anonymous::Refuse));
    assert_eq!(parse("tenant a"), Ok(Anonymous::Tenant("a".into())));
    assert!(parse("tenant ").is_err() && parse("open").is_err());
    assert_eq!(String::from(Anonymous::Tenant("a".into())), "tenant a");
}

#[test]
fn hashed_and_plain_tokens_prove_their_tenant_only() {
    let mut b = tenant("b", "");
    b.token_hash = Some(cheap_hash("tb"));
    let auth = Auth::new(&section(vec![tenant("a", "ta"), b], Anonymous::Refuse)).unwrap();
    let base = Base::Connection(5);
    let a = auth.identify(&base, Some("ta")).unwrap();
    let b = auth.identify(&base, Some("tb")).unwrap();
    assert_eq!((a.label(), b.label()), ("a", "b"));
    assert_ne!(a.id, b.id);
    assert!(super::super::is_configured(a.id));
    for wrong in ["tb ", "TA", "", "adm2"] {
        assert_eq!(
            auth.identify(&base, Some(wrong)).unwrap_err(),
            AuthError::UnknownToken
        );
    }
    assert_eq!(auth.identify(&base, None).unwrap_err(), AuthError::Missing);
    assert!(auth
        .identify(&base, Some("adm"))
        .unwrap()
        .may(Action::Admin));
    assert_eq!(auth.hello("b", Some("tb")).unwrap().label(), "b");
    assert!(auth.hello("b", Some("ta")).is_err() && auth.hello("b", None).is_err());
    // Cached answers are the same answers.
    assert_eq!(auth.identify(&base, Some("tb")).unwrap().id, b.id);
    assert!(!AuthError::UnknownToken.message().contains("tb"));
}

#[test]
fn without_policies_everyone_may_call_and_the_admin_token_decides_loads() {
    let auth = Auth::new(&section(vec![tenant("a", "ta")], Anonymous::Connection)).unwrap();
    let anon = auth.identify(&Base::Connection(7), None).unwrap();
    assert_eq!(anon.id, 7);
    assert!(anon.may(Action::Call("sobel")) && anon.may(Action::Metrics));
    assert!(!anon.may(Action::Load(None)) && !anon.has_policy());
    let open = Auth::new(&AuthSection {
        token_check_budget: std::time::Duration::from_millis(100),
        tenants: vec![],
        anonymous: Anonymous::Connection,
        admin_token: None,
    })
    .unwrap();
    let p = open
        .identify(&Base::Connection(8), Some("whatever"))
        .unwrap();
    assert!(
        p.may(Action::Load(Some("x"))),
        "no credentials: a token is ignored"
    );
}

#[test]
fn policies_deny_by_default_and_grant_by_pattern_and_role() {
    let mut a = tenant("a", "ta");
    a.call = Some(vec!["sobel".into(), "resnet*".into()]);
    let mut op = tenant("op", "to");
    op.roles = Some(vec![Role::Operator]);
    op.load = Some(vec!["topk".into()]);
    let auth = Auth::new(&section(
        vec![a, op, tenant("c", "tc")],
        Anonymous::Connection,
    ))
    .unwrap();
    let base = Base::Connection(1);
    let a = auth.identify(&base, Some("ta")).unwrap();
    assert!(a.may(Action::Call("sobel")) && a.may(Action::Call("resnet50")));
    assert!(!a.may(Action::Call("sobelx")) && !a.may(Action::Call("topk")));
    assert!(!a.may(Action::Metrics) && !a.may(Action::Load(None)) && a.has_policy());
    let op = auth.identify(&base, Some("to")).unwrap();
    assert!(op.may(Action::Load(None)) && op.may(Action::Load(Some("topk"))));
    assert!(!op.may(Action::Load(Some("sobel"))) && !op.may(Action::Admin));
    assert!(op.may(Action::Metrics) && !op.may(Action::Call("topk")));
    for p in [
        auth.identify(&base, Some("tc")).unwrap(),
        auth.identify(&base, None).unwrap(),
    ] {
        assert!(!p.may(Action::Call("sobel")) && !p.may(Action::Catalog));
    }
    let same = Auth::new(&section(
        vec![tenant("a", "t"), tenant("b", "t")],
        Anonymous::Connection,
    ));
    assert!(same
        .err()
        .unwrap()
        .contains("tenant `b` has the same token as tenant `a`"));
    let admin = Auth::new(&section(vec![tenant("a", "adm")], Anonymous::Connection));
    assert!(admin
        .err()
        .unwrap()
        .contains("same token as the admin token"));
    let mut bad = tenant("x", "tx");
    bad.call = Some(vec!["a*b".into()]);
    let err = Auth::new(&section(vec![bad], Anonymous::Connection))
        .err()
        .unwrap();
    assert!(err.contains("pattern `a*b`"), "{err}");
}

#[test]
fn a_reload_refuses_removed_tokens_on_remembered_sessions() {
    let auth = Auth::new(&section(vec![tenant("a", "ta")], Anonymous::Refuse)).unwrap();
    let mut session = Session::new(Base::Connection(3));
    assert_eq!(session.identify(&auth, Some("ta")).unwrap().label(), "a");
    auth.reload(&section(vec![tenant("a", "ta2")], Anonymous::Refuse))
        .unwrap();
    assert_eq!(
        session.identify(&auth, Some("ta")).unwrap_err(),
        AuthError::UnknownToken
    );
    assert_eq!(session.identify(&auth, Some("ta2")).unwrap().label(), "a");
    // A reload that fails changes nothing.
    let err = auth
        .reload(&section(
            vec![tenant("a", "1"), tenant("a", "2")],
            Anonymous::Refuse,
        ))
        .unwrap_err();
    assert!(err.contains("configured twice"), "{err}");
    assert_eq!(session.identify(&auth, Some("ta2")).unwrap().label(), "a");
}

#[test]
fn a_hello_is_checked_again_after_a_reload() {
    let auth = Auth::new(&section(vec![tenant("a", "ta")], Anonymous::Refuse)).unwrap();
    let mut rac = Session::new(Base::Connection(4));
    assert_eq!(rac.current(&auth).unwrap_err(), AuthError::Missing);
    assert!(rac.hello(&auth, "a", Some("tb")).is_err());
    assert_eq!(rac.hello(&auth, "a", Some("ta")).unwrap().label(), "a");
    assert_eq!(rac.current(&auth).unwrap().label(), "a");
    auth.reload(&section(vec![tenant("a", "ta")], Anonymous::Refuse))
        .unwrap();
    assert_eq!(rac.current(&auth).unwrap().label(), "a", "token kept");
    auth.reload(&section(vec![tenant("b", "ta")], Anonymous::Refuse))
        .unwrap();
    assert!(matches!(rac.current(&auth), Err(AuthError::Hello(_))));
}

#[test]
fn an_anonymous_tenant_must_exist_and_a_certificate_wins() {
    let err = Auth::new(&section(vec![], Anonymous::Tenant("z".into())))
        .err()
        .unwrap();
    assert!(err.contains("names no configured tenant"), "{err}");
    let auth = Auth::new(&section(
        vec![tenant("a", "ta")],
        Anonymous::Tenant("a".into()),
    ))
    .unwrap();
    assert_eq!(
        auth.identify(&Base::Connection(2), None).unwrap().label(),
        "a"
    );
    let cert = Base::Certificate("team-c".into());
    assert_eq!(auth.identify(&cert, Some("ta")).unwrap().label(), "team-c");
}

#[test]
fn hash_token_makes_a_phc_string_that_verifies() {
    let phc = hash_token("s3cret").unwrap();
    assert!(phc.starts_with("$argon2id$"), "{phc}");
    let secret = Secret::Hashed(phc.clone());
    assert!(secret.proves("s3cret") && !secret.proves("s3cre"));
    assert_ne!(phc, hash_token("s3cret").unwrap(), "fresh salt");
}
