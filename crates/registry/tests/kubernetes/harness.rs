//! A real Kubernetes control plane for the Kubernetes tests: etcd (Debian's
//! `etcd-server`), kube-apiserver, kube-controller-manager and kube-scheduler built by
//! `deploy/k8s-test/build.sh`, on free loopback ports in a temporary directory, and
//! three Node objects standing for three netaccel nodes. There is no kubelet: Pods are
//! checked as the API server stores them (bound to a node by the scheduler, never run).
//!
//! Nodes stay Ready because nothing marks them otherwise: the node lifecycle
//! controller (which would taint Nodes whose kubelet stops renewing) is not started,
//! and the `not-ready` taint the API server puts on new Nodes is removed here, as the
//! controller would for a Ready node.
//!
//! Everything started is killed when the [`ControlPlane`] drops, and the directory is
//! removed. Without the binaries the tests are skipped, unless `CI` is set.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use serde_json::json;

pub const K8S_VERSION: &str = "v1.34.2";
pub const HELM_VERSION: &str = "v3.19.5";
/// The three Kubernetes nodes; a netaccel node's name is its Kubernetes node's name.
pub const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

pub use testkit::free_port;

/// Where `deploy/k8s-test/build.sh` put the binaries.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NETACCEL_K8S_BIN") {
        return dir.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    cache
        .join("netaccel")
        .join(format!("kubernetes-{K8S_VERSION}"))
}

/// Where `deploy/k8s-test/build.sh` put helm.
pub fn helm() -> PathBuf {
    if let Some(dir) = std::env::var_os("NETACCEL_HELM_BIN") {
        return PathBuf::from(dir).join("helm");
    }
    bin_dir()
        .parent()
        .unwrap()
        .join(format!("helm-{HELM_VERSION}"))
        .join("helm")
}

/// Whether the control plane can run here; `false` means skip (never under CI).
pub fn available() -> bool {
    let dir = bin_dir();
    let missing: Vec<&str> = [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    .into_iter()
    .filter(|b| !dir.join(b).is_file())
    .collect();
    let etcd = Command::new("etcd").arg("--version").output().is_ok();
    if missing.is_empty() && etcd {
        return true;
    }
    let why = format!(
        "Kubernetes test skipped: {} missing in {} (run deploy/k8s-test/build.sh){}",
        missing.join(", "),
        dir.display(),
        if etcd {
            ""
        } else {
            "; etcd missing (apt-get install etcd-server)"
        }
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why}");
    }
    eprintln!("{why}");
    false
}

/// A started process, killed on drop; its output goes to a log file in the
/// control plane's directory, printed when a test fails to start it.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &Path, name: &'static str, program: &Path, args: &[String]) -> Proc {
    let log = dir.join(format!("{name}.log"));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
    Proc { name, child, log }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Proc {
    /// Waits for `addr` to accept connections; fails with the log if the process exits.
    fn wait_port(&mut self, addr: SocketAddr, within: Duration) {
        let deadline = Instant::now() + within;
        while TcpStream::connect(addr).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("{} exited ({status}):\n{}", self.name, tail(&self.log));
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {addr}:\n{}",
                self.name,
                tail(&self.log)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited ({status}):\n{}", self.name, tail(&self.log));
        }
    }
}

pub struct ControlPlane {
    /// Dropped first: processes stop before the directory goes.
    procs: Vec<Proc>,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: Client,
    pub started_in: Duration,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.procs.clear();
        if std::thread::panicking() {
            eprintln!("control plane logs kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl ControlPlane {
    /// Starts etcd, the API server, the controller manager and the scheduler, and
    /// creates the Ready [`NODES`].
    pub async fn start() -> ControlPlane {
        ControlPlane::start_with_nodes(&NODES).await
    }

    /// [`ControlPlane::start`] with these stand-in Nodes (none where a real kubelet
    /// registers its own).
    pub async fn start_with_nodes(stand_ins: &[&str]) -> ControlPlane {
        let started = Instant::now();
        let bin = bin_dir();
        let dir = std::env::temp_dir().join(format!(
            "netaccel-k8s-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut procs = Vec::new();

        // etcd on free ports (a port taken between the probe and the bind makes etcd
        // exit: start it again on new ones).
        let etcd_url = loop {
            let (client, peer) = (free_port(), free_port());
            let args: Vec<String> = [
                "--name",
                "e",
                "--data-dir",
                &dir.join("etcd").to_string_lossy(),
                "--listen-client-urls",
                &format!("http://127.0.0.1:{client}"),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{client}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("e=http://127.0.0.1:{peer}"),
                "--unsafe-no-fsync",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut etcd = spawn(&dir, "etcd", Path::new("etcd"), &args);
            let addr: SocketAddr = format!("127.0.0.1:{client}").parse().unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut up = false;
            while Instant::now() < deadline {
                if etcd.child.try_wait().unwrap().is_some() {
                    break;
                }
                if TcpStream::connect(addr).is_ok() {
                    up = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if up {
                procs.push(etcd);
                break format!("http://127.0.0.1:{client}");
            }
            let _ = std::fs::remove_dir_all(dir.join("etcd"));
            eprintln!(
                "etcd did not start on {client}/{peer}; again on other ports:\n{}",
                tail(&etcd.log)
            );
        };

        // Credentials: a static token in system:masters for everything here, and the
        // service-account signing key the API server insists on.
        let token = "netaccel-test-admin-token";
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{token},admin,admin-uid,system:masters\n"),
        )
        .unwrap();
        let sa = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.join("sa.key"), sa.serialize_pem()).unwrap();
        std::fs::write(dir.join("sa.pub"), sa.public_key_pem()).unwrap();

        let port = free_port();
        let d = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let args: Vec<String> = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", d("pki")),
            format!("--token-auth-file={}", d("tokens.csv")),
            "--authorization-mode=RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", d("sa.pub")),
            format!("--service-account-signing-key-file={}", d("sa.key")),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // No kubelet mounts tokens here; Pods need no ServiceAccount object.
            "--disable-admission-plugins=ServiceAccount".into(),
            "--runtime-config=resource.k8s.io/v1=true".into(),
            "--enable-priority-and-fairness=false".into(),
            // A real kubelet (kubernetes_pods.rs) is reached at its node's address, not
            // its name, for logs.
            "--kubelet-preferred-address-types=InternalIP".into(),
            "--v=1".into(),
        ];
        let mut apiserver = spawn(&dir, "kube-apiserver", &bin.join("kube-apiserver"), &args);
        apiserver.wait_port(
            format!("127.0.0.1:{port}").parse().unwrap(),
            Duration::from_secs(90),
        );
        procs.push(apiserver);

        let server = format!("https://127.0.0.1:{port}");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n    namespace: default\ncurrent-context: test\n"
            ),
        )
        .unwrap();
        let kc = Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        let client = Client::try_from(config).unwrap();

        // Ready: the default namespace exists (the API server's bootstrap made it) and
        // resource.k8s.io/v1 is served.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ns: Api<Namespace> = Api::all(client.clone());
            let dra = client
                .list_api_group_resources("resource.k8s.io/v1")
                .await
                .map(|r| r.resources.iter().any(|r| r.name == "resourceslices"))
                .unwrap_or(false);
            if ns.get("default").await.is_ok() && dra {
                break;
            }
            procs.last_mut().unwrap().check_alive();
            assert!(
                Instant::now() < deadline,
                "the API server did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        let kc_arg = format!("--kubeconfig={}", kubeconfig.display());
        let controllers = [
            "deployment-controller",
            "replicaset-controller",
            "daemonset-controller",
            "garbage-collector-controller",
            "disruption-controller",
            "resourceclaim-controller",
            "namespace-controller",
            "pod-garbage-collector-controller",
        ]
        .join(",");
        procs.push(spawn(
            &dir,
            "kube-controller-manager",
            &bin.join("kube-controller-manager"),
            &[
                kc_arg.clone(),
                format!("--controllers={controllers}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--concurrent-replicaset-syncs=5".into(),
                "--v=1".into(),
            ],
        ));
        procs.push(spawn(
            &dir,
            "kube-scheduler",
            &bin.join("kube-scheduler"),
            &[
                kc_arg,
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--v=1".into(),
            ],
        ));

        let nodes: Api<Node> = Api::all(client.clone());
        for &name in stand_ins {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "netaccel.io/node": "true"}},
            }))
            .unwrap();
            nodes.create(&PostParams::default(), &node).await.unwrap();
            let status = json!({"status": {
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "250"},
                "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "250"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "stands for a netaccel node",
                    "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}});
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await
                .unwrap();
            nodes
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"taints": null}})),
                )
                .await
                .unwrap();
        }
        let mut plane = ControlPlane {
            procs,
            dir,
            kubeconfig,
            client,
            started_in: Duration::ZERO,
        };
        for p in &mut plane.procs {
            p.check_alive();
        }
        plane.started_in = started.elapsed();
        eprintln!(
            "control plane {K8S_VERSION} up in {:.1} s",
            plane.started_in.as_secs_f64()
        );
        plane
    }

    /// `kubectl` built beside the control plane, with this control plane's kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(bin_dir().join("kubectl"));
        c.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        c
    }

    /// Fails with the process's log if a control-plane process died.
    pub fn check_alive(&mut self) {
        for p in &mut self.procs {
            p.check_alive();
        }
    }
}

fn now() -> String {
    k8s_openapi::chrono::Utc::now().to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true)
}

/// Polls `f` every 100 ms until it answers `Some`, for at most `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
