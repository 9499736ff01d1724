use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

/// A review as kube-apiserver 1.34 sends it for a Pod a ReplicaSet of Deployment `web`
/// creates (name not yet generated, owner set, annotations from the template).
fn review(annotations: Value) -> Value {
    json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "0c9a8d74-9cb7-44dd-b98e-09fd62def2f4",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {
                "kind": "Pod", "apiVersion": "v1",
                "metadata": {
                    "generateName": "web-5d8f7c9b4-",
                    "namespace": "default",
                    "labels": {"app": "web", "pod-template-hash": "5d8f7c9b4"},
                    "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": "web-5d8f7c9b4", "uid": "u1", "controller": true}]
                },
                "spec": {"containers": [
                    {"name": "app", "image": "busybox"},
                    {"name": "side", "image": "busybox", "env": [{"name": "NETACCEL_REGISTRY", "value": "mine"}]}
                ]}
            },
            "oldObject": null,
            "dryRun": false
        }
    })
}

fn parse(v: &Value) -> AdmissionRequest<Pod> {
    parse_review(&serde_json::to_vec(v).unwrap()).unwrap()
}

fn binding() -> Binding {
    Binding {
        id: "k8s-1".into(),
        function: "web".into(),
        node: "node-a".into(),
        http: "10.0.0.1:8080".into(),
        rac: "10.0.0.1:9400".into(),
        opencl: Some("10.0.0.1:9500".into()),
        https: Some("10.0.0.1:8443".into()),
        rac_tls: Some("10.0.0.1:9443".into()),
        grpc: None,
        grpc_tls: None,
    }
}

#[test]
fn a_deployment_pod_asks_for_its_deployment_function() {
    let req = parse(&review(
        json!({ACCELERATOR: "sobel", BACKEND: "cpu", HASH: "h1"}),
    ));
    let Verdict::Bind(ask) = ask(&req) else {
        panic!("expected a binding")
    };
    assert_eq!(ask.function, "web");
    assert_eq!(ask.accelerator, "sobel");
    assert_eq!(ask.backend.as_deref(), Some("cpu"));
    assert_eq!(ask.hash.as_deref(), Some("h1"));
    assert!(ask.colocate);
    assert_eq!(
        instance_id(&req.uid).unwrap(),
        "k8s-0c9a8d74-9cb7-44dd-b98e-09fd62def2f4"
    );
}

#[test]
fn pods_without_the_annotation_and_other_operations_are_ignored() {
    assert_eq!(ask(&parse(&review(json!({"other": "x"})))), Verdict::Ignore);
    let mut update = review(json!({ACCELERATOR: "sobel"}));
    update["request"]["operation"] = json!("UPDATE");
    assert_eq!(ask(&parse(&update)), Verdict::Ignore);
}

#[test]
fn annotations_that_cannot_be_honoured_are_denied_with_the_reason() {
    for (annotations, want) in [
        (json!({ACCELERATOR: "to upper"}), "' '"),
        (json!({ACCELERATOR: "sobel", BACKEND: "fpga"}), "fpga"),
        (json!({ACCELERATOR: "sobel", COLOCATE: "yes"}), COLOCATE),
        (json!({ACCELERATOR: "sobel", FUNCTION: "a/b"}), FUNCTION),
        (json!({ACCELERATOR: "sobel", HASH: ""}), HASH),
        (json!({ACCELERATOR: "sobel", TENANT: "team a"}), TENANT),
        (
            json!({ACCELERATOR: "sobel", TENANT_TOKEN_SECRET: "tok"}),
            "needs netaccel.io/tenant",
        ),
        (
            json!({ACCELERATOR: "sobel", TENANT: "a", TENANT_TOKEN_SECRET: "t/x"}),
            TENANT_TOKEN_SECRET,
        ),
    ] {
        match ask(&parse(&review(annotations.clone()))) {
            Verdict::Deny(reason) => assert!(reason.contains(want), "{annotations}: {reason}"),
            other => panic!("{annotations}: {other:?}"),
        }
    }
}

#[test]
fn malformed_reviews_are_refused_with_a_sentence() {
    for body in [
        &b""[..],
        b"{",
        b"[]",
        b"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\"}",
        b"{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1beta1\",\"request\":{}}",
    ] {
        let err = parse_review(body).unwrap_err();
        assert!(!err.0.is_empty());
    }
    let mut v = review(json!({ACCELERATOR: "sobel"}));
    v["apiVersion"] = json!("admission.k8s.io/v1beta1");
    assert!(parse_review(&serde_json::to_vec(&v).unwrap()).is_err());
    v["apiVersion"] = json!("admission.k8s.io/v1");
    v["request"]["uid"] = json!("");
    assert!(parse_review(&serde_json::to_vec(&v).unwrap()).is_err());
}

#[test]
fn the_patch_records_the_binding_and_applies_to_the_pod() {
    let v = review(json!({ACCELERATOR: "sobel"}));
    let req = parse(&v);
    let pod = req.object.clone().unwrap();
    let p = patch(&pod, &binding(), "http://registry:7400", true, None);
    let mut doc = v["request"]["object"].clone();
    json_patch::patch(&mut doc, &p).unwrap();
    assert_eq!(doc["metadata"]["annotations"][INSTANCE], "k8s-1");
    assert_eq!(doc["metadata"]["annotations"][NODE], "node-a");
    assert_eq!(doc["metadata"]["labels"][INSTANCE], "k8s-1");
    assert_eq!(doc["metadata"]["labels"]["app"], "web");
    assert_eq!(doc["spec"]["nodeSelector"][HOSTNAME_LABEL], "node-a");
    let env = |c: usize| -> Vec<(String, String)> {
        doc["spec"]["containers"][c]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["value"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let app = env(0);
    for (k, want) in [
        ("NETACCEL_REGISTRY", "http://registry:7400"),
        ("NETACCEL_FUNCTION", "web"),
        ("NETACCEL_INSTANCE", "k8s-1"),
        ("NETACCEL_NODE_HTTP", "10.0.0.1:8080"),
        ("NETACCEL_NODE_RAC", "10.0.0.1:9400"),
        ("NETACCEL_OPENCL_NODES", "10.0.0.1:9500"),
        ("NETACCEL_NODE_HTTPS", "10.0.0.1:8443"),
        ("NETACCEL_NODE_RAC_TLS", "10.0.0.1:9443"),
    ] {
        assert!(
            app.contains(&(k.to_string(), want.to_string())),
            "{k} in {app:?}"
        );
    }
    // A listener the node does not have is not named at all.
    assert!(
        !app.iter().any(|(k, _)| k.starts_with("NETACCEL_NODE_GRPC")),
        "{app:?}"
    );
    // The side container's own NETACCEL_REGISTRY stays; the rest is appended.
    let side = env(1);
    assert_eq!(
        side.iter()
            .filter(|(k, _)| k == "NETACCEL_REGISTRY")
            .count(),
        1
    );
    assert!(side.contains(&("NETACCEL_REGISTRY".into(), "mine".into())));
    assert_eq!(side.len(), 8);
    // Not colocated: no node selector; no OpenCL and no TLS listeners: none of their
    // variables.
    let mut b = binding();
    (b.opencl, b.https, b.rac_tls) = (None, None, None);
    let mut doc = v["request"]["object"].clone();
    json_patch::patch(&mut doc, &patch(&pod, &b, "r", false, None)).unwrap();
    assert!(doc["spec"].get("nodeSelector").is_none());
    assert_eq!(
        doc["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn a_pod_without_annotations_map_or_owner_still_patches() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "solo"},
        "spec": {"containers": [{"name": "a"}], "nodeSelector": {"disk": "ssd"}}
    }))
    .unwrap();
    assert_eq!(function_of(&pod).as_deref(), Some("solo"));
    let mut doc = serde_json::to_value(&pod).unwrap();
    json_patch::patch(&mut doc, &patch(&pod, &binding(), "r", true, None)).unwrap();
    assert_eq!(doc["metadata"]["annotations"][INSTANCE], "k8s-1");
    assert_eq!(doc["metadata"]["labels"][INSTANCE], "k8s-1");
    assert_eq!(doc["spec"]["nodeSelector"]["disk"], "ssd");
    assert_eq!(doc["spec"]["nodeSelector"][HOSTNAME_LABEL], "node-a");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Fuzz-like: a valid review with bytes changed, cut or inserted is either read
    /// or refused as malformed; reading, deciding and patching never panic.
    #[test]
    fn hostile_bodies_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut body = serde_json::to_vec(&review(json!({ACCELERATOR: "sobel", COLOCATE: "true"}))).unwrap();
        for (at, byte, kind) in edits {
            let i = at.index(body.len());
            match kind {
                0 => body[i] = byte,
                1 => body.insert(i, byte),
                _ => { body.remove(i); }
            }
        }
        if truncate {
            body.truncate(cut.index(body.len() + 1));
        }
        if let Ok(req) = parse_review(&body) {
            if let (Verdict::Bind(a), Some(pod)) = (ask(&req), req.object.as_ref()) {
                let _ = patch(pod, &binding(), "r", a.colocate, a.tenant.as_ref());
            }
        }
    }
}

#[test]
fn a_pods_tenant_gets_its_name_and_its_token_from_its_secret() {
    let v = review(
        json!({ACCELERATOR: "sobel", TENANT: "team-a", TENANT_TOKEN_SECRET: "team-a-token"}),
    );
    let req = parse(&v);
    let Verdict::Bind(ask) = ask(&req) else {
        panic!("not bound")
    };
    let tenant = ask.tenant.clone().unwrap();
    assert_eq!(
        tenant,
        Tenant {
            name: "team-a".into(),
            token_secret: Some("team-a-token".into())
        }
    );
    let pod = req.object.clone().unwrap();
    let mut doc = v["request"]["object"].clone();
    json_patch::patch(&mut doc, &patch(&pod, &binding(), "r", true, Some(&tenant))).unwrap();
    let env = doc["spec"]["containers"][0]["env"].as_array().unwrap();
    let var = |name: &str| env.iter().find(|e| e["name"] == name).cloned();
    assert_eq!(var("NETACCEL_TENANT").unwrap()["value"], "team-a");
    // The token is the kubelet's to read: a reference to the Secret, never a value.
    let token = var("NETACCEL_TENANT_TOKEN").unwrap();
    assert!(token.get("value").is_none(), "{token}");
    assert_eq!(
        token["valueFrom"]["secretKeyRef"],
        json!({"name": "team-a-token", "key": "token"})
    );
    // A tenant without a Secret (a node that maps it from certificates, or admits it
    // by name): the name only.
    let named = Tenant {
        name: "team-b".into(),
        token_secret: None,
    };
    let mut doc = v["request"]["object"].clone();
    json_patch::patch(&mut doc, &patch(&pod, &binding(), "r", true, Some(&named))).unwrap();
    let env = doc["spec"]["containers"][0]["env"].as_array().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "NETACCEL_TENANT" && e["value"] == "team-b"));
    assert!(!env.iter().any(|e| e["name"] == "NETACCEL_TENANT_TOKEN"));
}
