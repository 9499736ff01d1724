//! A claim for a tenant: the netaccel node refuses anonymous callers and gives team-a
//! `sobel` and team-b `echo`; each team's claim template names its tenant and the
//! Secret of its token in DRA's opaque device configuration, and the DRA plugin puts
//! `NETACCEL_TENANT` and `NETACCEL_TENANT_TOKEN` into the claim's CDI spec. team-a's
//! Pod calls sobel over HTTP and RAC with them (and is refused without them); team-b's
//! Pod calls its echo slot and is refused sobel by the node's policy. The tokens are in
//! the CDI specs (mode 0600) and in no log of the node's processes nor the checkpoint.

use super::*;

use k8s_openapi::api::core::v1::Secret;
use std::os::unix::fs::PermissionsExt;

const TOKEN_A: &str = "tok-a-5b8e0c61f2d94d1aa3c7";
const TOKEN_B: &str = "tok-b-0f3a9d2e7c1b4e65b8d0";

/// node.toml: anonymous callers refused, team-a may call sobel, team-b echo.
fn tenants_config() -> String {
    format!(
        "anonymous = \"refuse\"\n\
         [[tenants]]\nname = \"team-a\"\ntoken = \"{TOKEN_A}\"\ncall = [\"sobel\"]\n\
         [[tenants]]\nname = \"team-b\"\ntoken = \"{TOKEN_B}\"\ncall = [\"echo\"]\n"
    )
}

/// A claim template for one device holding `accelerator`, configured for `tenant`
/// whose token is in the Secret `<tenant>-token`.
fn tenant_template(name: &str, accelerator: &str, tenant: &str) -> ResourceClaimTemplate {
    configured_template(
        name,
        accelerator,
        json!({"apiVersion": "netaccel.io/v1alpha1", "kind": "TenantConfig",
            "tenant": tenant, "tokenSecret": format!("{tenant}-token")}),
    )
}

/// A claim template for one device holding `accelerator`, with these parameters of
/// the plugin's opaque configuration.
fn configured_template(
    name: &str,
    accelerator: &str,
    parameters: serde_json::Value,
) -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "acc", "exactly": {
                "deviceClassName": "netaccel.io",
                "selectors": [{"cel": {"expression":
                    format!("device.attributes[\"netaccel.io\"].accelerator == \"{accelerator}\"")}}]
            }}],
            "config": [{"requests": ["acc"], "opaque": {"driver": "netaccel.io", "parameters": parameters}}]
        }}}
    }))
    .unwrap()
}

/// A Pod of `template`'s claim, the test image at /in, running `script` then sleeping
/// (so that its claim stays prepared while the test reads the CDI spec).
fn tenant_pod(name: &str, template: &str, script: &str) -> Pod {
    script_pod(
        name,
        &format!("{script}; exec sleep 3600"),
        json!({
            "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": template}],
            "volumes": [{"name": "in", "configMap": {"name": "image"}}],
            "containers": [{"resources": {"claims": [{"name": "acc"}]},
                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
        }),
    )
}

/// The first `n` lines Pod `name` printed, once it has.
async fn printed(plane: &ControlPlane, name: &str, n: usize) -> Vec<String> {
    eventually(
        &format!("{name}'s {n} lines"),
        Duration::from_secs(90),
        || {
            let text = logs(plane, name);
            async move {
                let lines: Vec<String> = text.lines().map(String::from).collect();
                (lines.len() >= n).then_some(lines)
            }
        },
    )
    .await
}

#[test]
fn a_claim_for_a_tenant_calls_with_the_injected_credential_and_another_tenant_is_refused() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let config = tenants_config();
        // A second sobel slot for the Pod the admission webhook binds.
        let (_registry, _netaccel) = dra_setup_configured(
            plane,
            net,
            node,
            &["sobel", "echo", "sobel"],
            "1500",
            &config,
        )
        .await;
        let secrets: Api<Secret> = Api::default_namespaced(plane.client.clone());
        for (tenant, token) in [("team-a", TOKEN_A), ("team-b", TOKEN_B)] {
            let secret: Secret = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{tenant}-token")},
                "stringData": {"token": token}
            }))
            .unwrap();
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
        }
        let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(plane.client.clone());
        for t in [
            tenant_template("sobel-team-a", "sobel", "team-a"),
            tenant_template("echo-team-b", "echo", "team-b"),
        ] {
            templates.create(&PostParams::default(), &t).await.unwrap();
        }

        // One line per call; a refusal's several lines joined.
        let call = format!("-p width={WIDTH} -p height={HEIGHT} -i /in/image.raw");
        let team_a = format!(
            "echo \"$NETACCEL_TENANT\"; \
             netaccel call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             netaccel call sobel --rac \"$NETACCEL_RAC\" {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             env -u NETACCEL_TENANT -u NETACCEL_TENANT_TOKEN netaccel call sobel {call} 2>&1 | tr '\\n' ' '; echo"
        );
        let team_b = format!(
            "echo \"$NETACCEL_TENANT\"; printf 'echoed' | netaccel call echo; echo; \
             netaccel call sobel {call} 2>&1 | tr '\\n' ' '; echo; \
             netaccel call sobel --rac \"$NETACCEL_RAC\" {call} 2>&1 | tr '\\n' ' '; echo"
        );
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        for pod in [
            tenant_pod("team-a", "sobel-team-a", &team_a),
            tenant_pod("team-b", "echo-team-b", &team_b),
        ] {
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }

        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        let a = printed(plane, "team-a", 4).await;
        assert_eq!(a[0], "team-a", "{a:?}");
        assert_eq!(a[1], want, "team-a over HTTP: {a:?}");
        assert_eq!(a[2], want, "team-a over RAC: {a:?}");
        assert!(
            a[3].contains("refuses anonymous callers"),
            "without the credential: {a:?}"
        );
        let b = printed(plane, "team-b", 4).await;
        assert_eq!(b[0], "team-b", "{b:?}");
        assert_eq!(b[1], "echoed", "team-b's own accelerator: {b:?}");
        for (line, how) in [(&b[2], "HTTP"), (&b[3], "RAC")] {
            assert!(
                line.contains("tenant `team-b` may not call `sobel`"),
                "team-b calling sobel over {how}: {b:?}"
            );
        }

        // The webhook's way: a Pod asking for sobel by annotation names its tenant and
        // the Secret of its token; the webhook gives its containers NETACCEL_TENANT and
        // a secretKeyRef for NETACCEL_TENANT_TOKEN, which the kubelet resolves.
        let mut hooked = script_pod(
            "team-a-hook",
            &format!(
                "echo \"$NETACCEL_TENANT\"; \
                 netaccel --node \"$NETACCEL_NODE_HTTP\" call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
                 netaccel call sobel --rac \"$NETACCEL_NODE_RAC\" {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
                 exec sleep 3600"
            ),
            json!({
                "volumes": [{"name": "in", "configMap": {"name": "image"}}],
                "containers": [{"volumeMounts": [{"name": "in", "mountPath": "/in"}]}]
            }),
        );
        hooked.metadata.annotations = Some(BTreeMap::from([
            ("netaccel.io/accelerator".to_string(), "sobel".to_string()),
            ("netaccel.io/tenant".to_string(), "team-a".to_string()),
            (
                "netaccel.io/tenant-token-secret".to_string(),
                "team-a-token".to_string(),
            ),
        ]));
        let stored = pods.create(&PostParams::default(), &hooked).await.unwrap();
        let env = serde_json::to_value(&stored.spec.unwrap().containers[0].env).unwrap();
        assert!(
            !env.to_string().contains(TOKEN_A),
            "the token's value in the Pod: {env}"
        );
        let token = env
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "NETACCEL_TENANT_TOKEN")
            .cloned();
        assert_eq!(
            token.map(|t| t["valueFrom"]["secretKeyRef"].clone()),
            Some(json!({"name": "team-a-token", "key": "token"})),
            "{env}"
        );
        let h = printed(plane, "team-a-hook", 3).await;
        assert_eq!(h[0], "team-a", "{h:?}");
        assert_eq!(h[1], want, "the webhook's Pod over HTTP: {h:?}");
        assert_eq!(h[2], want, "the webhook's Pod over RAC: {h:?}");

        tokens_only_in_the_cdi_specs(node);
        for name in ["team-a", "team-b", "team-a-hook"] {
            pods.delete(name, &Default::default()).await.unwrap();
        }
        eventually("the claims unprepared", Duration::from_secs(30), || {
            let specs = node.cdi_specs();
            async move { specs.is_empty().then_some(()) }
        })
        .await;
    });
}

/// Each token is in one CDI spec, which only its owner (root) reads, and in no log of
/// the node's processes (plugin, kubelet, containerd) nor in the plugin's checkpoint.
fn tokens_only_in_the_cdi_specs(node: &KubeletNode) {
    let specs = node.cdi_specs();
    assert_eq!(specs.len(), 2, "{specs:?}");
    let mut holding = Vec::new();
    for spec in &specs {
        let path = node.dir.join("cdi").join(spec);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{spec}");
        let text = std::fs::read_to_string(&path).unwrap();
        for token in [TOKEN_A, TOKEN_B] {
            if text.contains(&format!("NETACCEL_TENANT_TOKEN={token}")) {
                holding.push(token);
            }
        }
    }
    holding.sort();
    assert_eq!(holding, [TOKEN_A, TOKEN_B], "one spec per tenant's claim");
    let checkpoint = node.dra_checkpoint().unwrap().to_string();
    for (what, text) in node
        .full_logs()
        .into_iter()
        .chain([("checkpoint".into(), checkpoint)])
    {
        for token in [TOKEN_A, TOKEN_B] {
            assert!(!text.contains(token), "a token in the {what}");
        }
    }
}

/// A CA, the netaccel node's certificate (for `ip`) and team-a's client certificate
/// (common name `team-a-client`): (directory of node files, Secret data of team-a).
fn mtls_pki(dir: &std::path::Path, ip: std::net::IpAddr) -> BTreeMap<String, String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "netaccel kubernetes test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = params.self_signed(&ca_key).unwrap();
    let issue = |name: &str, sans: Vec<String>, usage| {
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (node_cert, node_key) = issue(
        "netaccel-node",
        vec![ip.to_string()],
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("node.pem"), node_cert).unwrap();
    std::fs::write(dir.join("node.key"), node_key).unwrap();
    let (cert, key) = issue(
        "team-a-client",
        Vec::new(),
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    );
    BTreeMap::from([
        ("tls.crt".to_string(), cert),
        ("tls.key".to_string(), key),
        ("ca.crt".to_string(), ca.pem()),
    ])
}

#[test]
fn a_claim_for_a_tenant_with_a_client_certificate_calls_over_mutual_tls() {
    with_node(|mut c| async move {
        let Cluster { node, plane, net } = &mut c;
        let ip = net.ns_ip(0);
        let pki = node.dir.join("netaccel-pki");
        let secret_data = mtls_pki(&pki, ip.into());
        // Anonymous callers refused; team-a has no token: its certificate names it.
        let config = format!(
            "anonymous = \"refuse\"\n\
             [[tenants]]\nname = \"team-a\"\ncall = [\"sobel\"]\n\
             [tls]\nhttps = \"{ip}:8443\"\nrac = \"{ip}:9443\"\n\
             cert = \"{p}/node.pem\"\nkey = \"{p}/node.key\"\nclient_ca = \"{p}/ca.pem\"\n\
             client_certs = \"required\"\n\
             [tls.subjects]\nteam-a-client = \"team-a\"\n",
            p = pki.display()
        );
        let (_registry, _netaccel) =
            dra_setup_configured(plane, net, node, &["sobel"], "1500", &config).await;
        let secrets: Api<Secret> = Api::default_namespaced(plane.client.clone());
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "team-a-cert"},
            "stringData": secret_data
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let template = configured_template(
            "sobel-team-a-tls",
            "sobel",
            json!({"apiVersion": "netaccel.io/v1alpha1", "kind": "TenantConfig",
                "tenant": "team-a", "certificateSecret": "team-a-cert"}),
        );
        let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(plane.client.clone());
        templates
            .create(&PostParams::default(), &template)
            .await
            .unwrap();

        let call = format!("-p width={WIDTH} -p height={HEIGHT} -i /in/image.raw");
        let script = format!(
            "echo \"$NETACCEL_TENANT $NETACCEL_NODE $NETACCEL_RAC\"; \
             netaccel call sobel {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             netaccel call sobel --rac \"$NETACCEL_RAC\" {call} | od -An -v -tx1 | tr -d ' \\n'; echo; \
             netaccel call sobel --node \"http://$NETACCEL_NODE_HTTP\" {call} 2>&1 | tr '\\n' ' '; echo"
        );
        let pods: Api<Pod> = Api::default_namespaced(plane.client.clone());
        pods.create(
            &PostParams::default(),
            &tenant_pod("team-a-tls", "sobel-team-a-tls", &script),
        )
        .await
        .unwrap();

        let want = hex(&accel::reference::sobel(&test_image(), WIDTH, HEIGHT));
        let a = printed(plane, "team-a-tls", 4).await;
        assert_eq!(
            a[0],
            format!("team-a https://{ip}:8443 rac+tls://{ip}:9443"),
            "{a:?}"
        );
        assert_eq!(a[1], want, "team-a over HTTPS with its certificate: {a:?}");
        assert_eq!(
            a[2], want,
            "team-a over RAC/TLS with its certificate: {a:?}"
        );
        assert!(
            a[3].contains("refuses anonymous callers"),
            "over plain HTTP, without the certificate: {a:?}"
        );

        // The key is on the host in one 0600 file under the plugin's directory, and in
        // no log of the node's processes nor the checkpoint.
        let tls = node.dir.join("kubelet/plugins/netaccel.io/tls");
        let devices: Vec<_> = std::fs::read_dir(&tls).unwrap().flatten().collect();
        assert_eq!(devices.len(), 1, "one device's certificate directory");
        let key = devices[0].path().join("tls.key");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let key_pem = &secret_data["tls.key"];
        let key_line = key_pem.lines().nth(1).unwrap();
        let checkpoint = node.dra_checkpoint().unwrap().to_string();
        for (what, text) in node
            .full_logs()
            .into_iter()
            .chain([("checkpoint".into(), checkpoint)])
        {
            assert!(!text.contains(key_line), "the client key in the {what}");
        }

        pods.delete("team-a-tls", &Default::default())
            .await
            .unwrap();
        eventually("the claim unprepared", Duration::from_secs(30), || {
            let specs = node.cdi_specs();
            let gone = std::fs::read_dir(&tls).map_or(true, |d| d.count() == 0);
            async move { (specs.is_empty() && gone).then_some(()) }
        })
        .await;
    });
}
