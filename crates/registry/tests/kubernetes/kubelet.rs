//! A real Kubernetes node for the tests that run Pods: containerd (runc, CNI, CDI) and
//! the kubelet of the control plane's release, built and cached by
//! `deploy/k8s-test/build.sh`, registered with a [`ControlPlane`] started without
//! stand-in Nodes; and, when a test asks, netaccel's DRA kubelet plugin beside it.
//!
//! The node's address is the root namespace's address on the bridge of the
//! network-namespace harness (`netns`), never the machine's uplink: the kubelet refuses
//! a loopback node IP. Pods join that same bridge through the CNI bridge plugin (an
//! address from the top of its /24), so they reach the netaccel nodes in their
//! namespaces directly, with no routing, forwarding or NAT on the machine.
//!
//! What this kind of machine needs, learned once: containerd's
//! `restrict_oom_score_adj` (CAP_SYS_RESOURCE is gone from every bounding set, so runc
//! cannot raise the pause container's `oom_score_adj`); the cgroupfs driver with cgroup
//! v1 allowed and no per-QoS cgroups; the not-ready taint removed by hand (no node
//! lifecycle controller runs); images imported from OCI layout tarballs made here
//! (`deploy/k8s-test/image.sh`), Pods using `imagePullPolicy: Never`.
//!
//! Several nodes share the bridge: node `n` (from 0) is at the bridge's address plus
//! `n` (an address added to the bridge for `n > 0`, gone with the bridge) and gives its
//! Pods addresses `.100 + 50n` to `.149 + 50n`; each has its own directory (containerd's
//! root, state and socket, the kubelet's root, certificates and Pod logs, CNI state, CDI
//! specs) named after the node, and containerd's NRI socket, which is machine-wide, off.
//!
//! Not for: more than two nodes (the Pods' ranges), or Pods on the host network.
//!
//! On drop every Pod is deleted and its containers waited for (so the kubelet tears
//! down their sandboxes and network namespaces), then the plugin, the kubelet and
//! containerd are killed, any shim left is killed, and the mounts under the node's
//! directory are undone — the Pods' network namespaces among them: containerd mounts
//! them under its state directory, not in /var/run/netns.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::harness::{bin_dir, eventually, ControlPlane};

/// The sandbox image containerd is pinned to (its pause binary built from pause.c).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.1";
/// busybox with the netaccel CLI (`netaccel`) and the libraries it links.
pub const CLIENT_IMAGE: &str = "netaccel.io/test-client:1";

/// The repository's root (for deploy/k8s-test's scripts).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn containerd_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("NETACCEL_CONTAINERD_BIN") {
        return dir.into();
    }
    bin_dir()
        .parent()
        .unwrap()
        .join(format!("containerd-{CONTAINERD_VERSION}"))
}

pub const CONTAINERD_VERSION: &str = "v2.4.2";

/// The DRA kubelet plugin as built from the sources as they are now.
fn dra_plugin() -> PathBuf {
    let out = Command::new(repo().join("deploy/k8s-test/dra-plugin-path.sh"))
        .output()
        .expect("running deploy/k8s-test/dra-plugin-path.sh");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The busybox of Debian's busybox-static.
fn busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Whether a node can run here; `false` means skip (never under CI, which fails).
pub fn available() -> bool {
    let mut missing: Vec<String> = Vec::new();
    let mut need = |path: PathBuf, how: &str| {
        if !path.is_file() {
            missing.push(format!("{} ({how})", path.display()));
        }
    };
    let build = "run deploy/k8s-test/build.sh";
    need(bin_dir().join("kubelet"), build);
    need(bin_dir().join("pause"), build);
    for c in ["containerd", "ctr", "containerd-shim-runc-v2"] {
        need(containerd_dir().join(c), build);
    }
    need(dra_plugin(), build);
    need("/usr/sbin/runc".into(), "apt-get install runc");
    need(
        "/usr/lib/cni/bridge".into(),
        "apt-get install containernetworking-plugins",
    );
    if busybox().is_none() {
        missing.push("busybox (apt-get install busybox-static)".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push("root (the kubelet and containerd run as root)".into());
    }
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "Kubernetes Pod test skipped: missing {}",
        missing.join(", ")
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why}");
    }
    eprintln!("{why}");
    false
}

/// A started process logging to a file, killed on drop (and when the test process
/// dies: PDEATHSIG).
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(dir: &Path, name: &'static str, mut cmd: Command) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        // SAFETY: prctl is async-signal-safe and nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Proc { name, child, log }
    }

    fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited ({status}):\n{}", self.name, tail(&self.log));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The interface holding `ip` (the netns harness's bridge).
fn interface_of(ip: Ipv4Addr) -> String {
    let out = run(Command::new("ip").args(["-4", "-o", "addr", "show", "to", &ip.to_string()]));
    out.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no interface holds {ip}"))
        .to_string()
}

pub struct KubeletNode {
    /// Dropped after the Pods are gone (see `Drop`), plugin first.
    procs: Vec<Proc>,
    pub name: String,
    pub ip: Ipv4Addr,
    /// The last octet of this node's first Pod address (50 from there).
    pods_first: u8,
    pub dir: PathBuf,
    kubeconfig: PathBuf,
    socket: PathBuf,
}

impl KubeletNode {
    /// Starts containerd and the kubelet as node `name`, the `n`th node on the netns
    /// bridge whose root-namespace address is `bridge_ip` (see the module's doc),
    /// imports the images, and waits until the Node is Ready and schedulable.
    pub async fn start(
        plane: &ControlPlane,
        name: &str,
        bridge_ip: Ipv4Addr,
        n: u8,
    ) -> KubeletNode {
        assert!(
            n < 2,
            "two nodes at most: their Pods' ranges are .100-.149, .150-.199"
        );
        let started = Instant::now();
        let [a, b, c, d] = bridge_ip.octets();
        let ip = Ipv4Addr::new(a, b, c, d + n);
        if n > 0 {
            let bridge = interface_of(bridge_ip);
            run(Command::new("ip").args(["addr", "add", &format!("{ip}/24"), "dev", &bridge]));
        }
        let dir = plane.dir.join(name);
        assert!(!dir.exists(), "node {name} started twice");
        for d in ["cni", "cdi", "images", "kubelet"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let socket = dir.join("containerd.sock");
        let mut node = KubeletNode {
            procs: Vec::new(),
            name: name.to_string(),
            ip,
            pods_first: 100 + 50 * n,
            dir,
            kubeconfig: plane.kubeconfig.clone(),
            socket,
        };
        node.write_cni_config();
        node.start_containerd();
        node.import_images();
        node.start_kubelet();
        node.wait_ready(plane).await;
        eprintln!(
            "kubelet node {name} ({ip}) ready in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        node
    }

    /// The CNI network: the bridge of the netns harness, this node's Pods at 50
    /// addresses of its /24 from `pods_first`.
    fn write_cni_config(&self) {
        let [a, b, c, _] = self.ip.octets();
        let (first, last) = (self.pods_first, self.pods_first + 49);
        let config = json!({
            "cniVersion": "1.0.0", "name": "netaccel-test",
            "plugins": [{
                "type": "bridge", "bridge": interface_of(self.ip),
                "isGateway": false, "ipMasq": false, "hairpinMode": true,
                "ipam": {"type": "host-local", "dataDir": self.dir.join("cni-ipam"),
                    "ranges": [[{"subnet": format!("{a}.{b}.{c}.0/24"),
                        "rangeStart": format!("{a}.{b}.{c}.{first}"),
                        "rangeEnd": format!("{a}.{b}.{c}.{last}")}]]}
            }]
        });
        std::fs::write(
            self.dir.join("cni/10-netaccel.conflist"),
            serde_json::to_vec_pretty(&config).unwrap(),
        )
        .unwrap();
    }

    fn start_containerd(&mut self) {
        let d = |p: &str| self.dir.join(p).display().to_string();
        let config = format!(
            r#"version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = ["{cdi}"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni}"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
"#,
            root = d("containerd/root"),
            state = d("containerd/state"),
            socket = self.socket.display(),
            cdi = d("cdi"),
            cni = d("cni"),
        );
        let path = self.dir.join("containerd.toml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(containerd_dir().join("containerd"));
        cmd.arg("--config").arg(&path);
        // containerd finds its shim on PATH.
        let path_var = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path_var}", containerd_dir().display()));
        let mut proc = Proc::spawn(&self.dir, "containerd", cmd);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.socket.exists() {
            proc.check_alive();
            assert!(Instant::now() < deadline, "containerd did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.procs.push(proc);
    }

    /// `ctr` on this node's containerd, namespace `k8s.io` (the CRI's).
    fn ctr(&self) -> Command {
        let mut c = Command::new(containerd_dir().join("ctr"));
        c.arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "k8s.io"]);
        c
    }

    /// The pause image, and busybox with the netaccel CLI and the shared libraries it
    /// links (copied from this machine: the CLI is built here, against its libc).
    fn import_images(&self) {
        let images = self.dir.join("images");
        let pause = images.join("pause");
        std::fs::create_dir_all(&pause).unwrap();
        std::fs::copy(bin_dir().join("pause"), pause.join("pause")).unwrap();
        self.import(PAUSE_IMAGE, &pause, &["/pause"]);

        let client = images.join("client");
        std::fs::create_dir_all(client.join("bin")).unwrap();
        std::fs::create_dir_all(client.join("usr/local/bin")).unwrap();
        std::fs::create_dir_all(client.join("tmp")).unwrap();
        std::fs::copy(busybox().unwrap(), client.join("bin/busybox")).unwrap();
        let applets = run(Command::new(client.join("bin/busybox")).arg("--list"));
        for applet in applets.lines().filter(|a| *a != "busybox") {
            std::os::unix::fs::symlink("busybox", client.join("bin").join(applet)).unwrap();
        }
        let cli = super::netns::binary("netaccel");
        std::fs::copy(&cli, client.join("usr/local/bin/netaccel")).unwrap();
        for lib in linked_libraries(&cli) {
            let to = client.join(lib.strip_prefix("/").unwrap());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&lib, &to).unwrap();
        }
        self.import(CLIENT_IMAGE, &client, &["/bin/sh"]);
    }

    /// Imports the DRA kubelet plugin as it is built now as image `reference`: the
    /// static binary alone at /usr/local/bin (what its Dockerfile makes, without a
    /// builder), for the chart's DaemonSet.
    pub fn import_dra_plugin_image(&self, reference: &str) {
        let rootfs = self.dir.join("images").join("dra-plugin");
        std::fs::create_dir_all(rootfs.join("usr/local/bin")).unwrap();
        std::fs::create_dir_all(rootfs.join("tmp")).unwrap();
        std::fs::copy(
            dra_plugin(),
            rootfs.join("usr/local/bin/netaccel-dra-plugin"),
        )
        .unwrap();
        self.import(reference, &rootfs, &["/usr/local/bin/netaccel-dra-plugin"]);
    }

    fn import(&self, reference: &str, rootfs: &Path, entrypoint: &[&str]) {
        let tar = self.dir.join("images").join(format!(
            "{}.tar",
            rootfs.file_name().unwrap().to_string_lossy()
        ));
        run(Command::new(repo().join("deploy/k8s-test/image.sh"))
            .arg(reference)
            .arg(rootfs)
            .arg(&tar)
            .args(entrypoint));
        run(self.ctr().args(["images", "import"]).arg(&tar));
    }

    fn start_kubelet(&mut self) {
        let port = TcpListener::bind((self.ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = format!(
            r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: {port}
readOnlyPort: 0
healthzPort: 0
podLogsDir: {logs}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization: {{mode: AlwaysAllow}}
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerNode: true
"#,
            ip = self.ip,
            socket = self.socket.display(),
            logs = self.dir.join("pod-logs").display(),
        );
        let path = self.dir.join("kubelet.yaml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = Command::new(bin_dir().join("kubelet"));
        cmd.arg(format!("--config={}", path.display()))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--root-dir={}", self.dir.join("kubelet").display()))
            .arg(format!(
                "--cert-dir={}",
                self.dir.join("kubelet-pki").display()
            ))
            .arg(format!("--hostname-override={}", self.name))
            .arg(format!("--node-ip={}", self.ip))
            .arg("--v=2");
        self.procs.push(Proc::spawn(&self.dir, "kubelet", cmd));
        let addr = SocketAddr::from((self.ip, port));
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(addr).is_err() {
            self.check_alive();
            assert!(
                Instant::now() < deadline,
                "the kubelet did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ready, and without the not-ready taint the API server put on the new Node (the
    /// node lifecycle controller would remove it; it does not run here).
    async fn wait_ready(&mut self, plane: &ControlPlane) {
        let nodes: Api<Node> = Api::all(plane.client.clone());
        let name = self.name.clone();
        eventually("the kubelet's Node Ready", Duration::from_secs(60), || {
            let nodes = nodes.clone();
            let name = name.clone();
            async move {
                let node = nodes.get(&name).await.ok()?;
                let ready = node
                    .status?
                    .conditions?
                    .into_iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready.then_some(())
            }
        })
        .await;
        self.check_alive();
        nodes
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"taints": null}})),
            )
            .await
            .unwrap();
    }

    /// Starts netaccel's DRA kubelet plugin against `registry` and waits until the
    /// kubelet registered it. Its CDI specs go where containerd reads them; its
    /// checkpoint is in the plugin's directory.
    pub async fn start_dra_plugin(&mut self, registry: &str) {
        let health = SocketAddr::from((Ipv4Addr::LOCALHOST, super::harness::free_port()));
        let kubelet = self.dir.join("kubelet");
        let mut cmd = Command::new(dra_plugin());
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--node-name={}", self.name))
            .arg(format!("--registry={registry}"))
            .arg(format!(
                "--plugin-dir={}",
                kubelet.join("plugins/netaccel.io").display()
            ))
            .arg(format!(
                "--registrar-dir={}",
                kubelet.join("plugins_registry").display()
            ))
            .arg(format!("--cdi-dir={}", self.dir.join("cdi").display()))
            .arg(format!("--health={health}"));
        self.procs
            .insert(0, Proc::spawn(&self.dir, "dra-plugin", cmd));
        let url = format!("http://{health}/healthz");
        let registered = Instant::now() + Duration::from_secs(30);
        while ureq::get(&url).call().is_err() {
            self.check_alive();
            assert!(
                Instant::now() < registered,
                "the DRA plugin was not registered with the kubelet:\n{}",
                tail(&self.dir.join("dra-plugin.log"))
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills the DRA plugin (SIGKILL: nothing saved on the way out) and starts it
    /// again against the same registry; its log starts afresh.
    pub async fn restart_dra_plugin(&mut self, registry: &str) {
        let i = self
            .procs
            .iter()
            .position(|p| p.name == "dra-plugin")
            .expect("a DRA plugin running");
        self.procs.remove(i).kill();
        self.start_dra_plugin(registry).await;
    }

    /// The DRA plugin's log so far.
    pub fn dra_plugin_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("dra-plugin.log")).unwrap_or_default()
    }

    /// Each process's whole log so far: (name, text).
    pub fn full_logs(&self) -> Vec<(String, String)> {
        self.procs
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(&p.log).unwrap_or_default();
                (format!("{} log", p.name), text)
            })
            .collect()
    }

    /// The plugin's checkpoint of prepared claims (JSON), if written.
    pub fn dra_checkpoint(&self) -> Option<serde_json::Value> {
        let path = self.dir.join("kubelet/plugins/netaccel.io/checkpoint.json");
        let text = std::fs::read_to_string(path).ok()?;
        Some(serde_json::from_str(&text).unwrap())
    }

    /// The CDI spec files present (one per prepared claim).
    pub fn cdi_specs(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join("cdi"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        names
    }

    /// Fails with the log of a node process that died.
    pub fn check_alive(&mut self) {
        for p in &mut self.procs {
            p.check_alive();
        }
    }

    /// The last lines of each process's log (for a failing test's message).
    pub fn logs(&self) -> String {
        self.procs
            .iter()
            .map(|p| format!("--- {} ---\n{}", p.name, tail(&p.log)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Deletes every DaemonSet, Deployment and Pod and waits (at most 60 s) until no
    /// container of containerd runs.
    fn delete_pods(&self) {
        // Controllers first, so that no new Pod replaces a deleted one.
        let _ = Command::new(bin_dir().join("kubectl"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args([
                "delete",
                "daemonsets,deployments,replicasets",
                "--all",
                "--all-namespaces",
            ])
            .args(["--wait=false"])
            .output();
        let deleted = Command::new(bin_dir().join("kubectl"))
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .args([
                "delete",
                "pods",
                "--all",
                "--all-namespaces",
                "--grace-period=1",
            ])
            .args(["--wait=false"])
            .output();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            // Tasks of exited containers stay listed (STOPPED) until removed.
            let tasks = self.ctr().args(["tasks", "ls"]).output();
            if tasks.is_ok_and(|o| {
                o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("RUNNING")
            }) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let tasks = self.ctr().args(["tasks", "ls"]).output();
        eprintln!(
            "kubelet node: containers still running 60 s after deleting the Pods ({}); killing them:\n{}",
            deleted.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stderr).into_owned()),
            tasks.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stdout).into_owned())
        );
    }

    /// Kills the shims of this node's containerd that outlived it.
    fn kill_shims(&self) {
        let address = self.socket.display().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let shim = args
                .first()
                .is_some_and(|a| a.ends_with(b"containerd-shim-runc-v2"));
            if shim && args.contains(&address.as_bytes()) {
                // SAFETY: kill has no memory preconditions; the pid is a shim of ours.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }

    /// Lazily unmounts what is mounted under the node's directory, deepest first.
    fn unmount_all(&self) {
        let prefix = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut points: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|p| p.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = Command::new("umount").args(["-l", p]).output();
        }
    }
}

impl Drop for KubeletNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kubelet node logs:\n{}", self.logs());
        }
        self.delete_pods();
        self.procs.clear();
        self.kill_shims();
        self.unmount_all();
    }
}

/// The shared libraries `binary` loads, with the dynamic loader (from `ldd`).
fn linked_libraries(binary: &Path) -> Vec<PathBuf> {
    let out = run(Command::new("ldd").arg(binary));
    out.lines()
        .filter_map(|l| {
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}
