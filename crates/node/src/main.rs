//! The `netaccel-node` binary: parses the command line, loads the configuration,
//! starts the node and serves until SIGTERM/SIGINT.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use netaccel_node::config::LogFormat;
use netaccel_node::Config;

/// Serve accelerators over the network.
///
/// With no arguments: one CPU device with one slot per built-in accelerator, HTTP on
/// 127.0.0.1:8080, RAC v1 on 127.0.0.1:9400 and gRPC on 127.0.0.1:8001. Try `curl -X POST --data-binary hello localhost:8080/v1/fn/to_uppercase`.
/// Command-line options override the same settings of the --config file.
#[derive(Parser, Debug)]
#[command(
    name = "netaccel-node",
    version,
    after_help = "Signals: SIGTERM or SIGINT drains the node (stops accepting, lets in-flight calls \
                  finish within drain_timeout_ms, deregisters from the registry) and exits 0; \
                  SIGHUP reloads the TLS certificate, key and client CA, and the tenants \
                  (tokens, policies, anonymous) from the --config file.\n\
                  `netaccel-node hash-token` reads a token on stdin and prints its \
                  argon2 hash for a tenant's token_hash.\n\
                  Exit status: 2 for any configuration error, 1 when something the \
                  configuration names cannot be had (an address taken, a device that does \
                  not open). See docs/configuration.md."
)]
struct Args {
    /// TOML configuration: slots and what each loads, every bound, admin token, logs
    /// (see docs/configuration.md).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// HTTP listen address [default: 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "Listeners")]
    http: Option<SocketAddr>,
    /// RAC v1 listen address [default: 127.0.0.1:9400].
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "Listeners")]
    rac: Option<SocketAddr>,
    /// gRPC listen address (the Open Inference Protocol's GRPCInferenceService), or
    /// `off` [default: 127.0.0.1:8001; when that default is taken, as by a second node
    /// on the host, the node warns and serves without gRPC: give each node its own].
    #[arg(long, value_name = "ADDR|off", value_parser = grpc_listen, help_heading = "Listeners")]
    grpc: Option<GrpcListen>,
    /// Share this node's OpenCL devices with remote OpenCL clients on ADDR [default: not
    /// shared].
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "Listeners")]
    opencl: Option<SocketAddr>,
    /// Network path of the plain HTTP and RAC listeners: epoll (the default, the
    /// node's own event loop), tokio or io_uring.
    #[arg(long, value_name = "PATH", help_heading = "Listeners")]
    network: Option<netaccel_node::config::Network>,
    /// HTTPS listen address, beside the plain HTTP one (needs --tls-cert and --tls-key).
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "TLS")]
    https: Option<SocketAddr>,
    /// RAC v1 over TLS listen address, beside the plain RAC one (needs --tls-cert and
    /// --tls-key).
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "TLS")]
    rac_tls: Option<SocketAddr>,
    /// gRPC over TLS listen address, beside the plain gRPC one (needs --tls-cert and
    /// --tls-key).
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "TLS")]
    grpc_tls: Option<SocketAddr>,
    /// Remote OpenCL over TLS listen address, beside the plain OpenCL one (needs
    /// --opencl, --tls-cert and --tls-key).
    #[arg(long, value_name = "ADDR", value_parser = listen_addr, help_heading = "TLS")]
    opencl_tls: Option<SocketAddr>,
    /// The TLS certificate chain (PEM, leaf first); reloaded on SIGHUP.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM); reloaded on SIGHUP.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_key: Option<PathBuf>,
    /// Require client certificates issued by the CAs in FILE (PEM): mutual TLS;
    /// reloaded on SIGHUP.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: accept clients without a certificate too.
    #[arg(long, help_heading = "TLS")]
    tls_client_cert_optional: bool,
    /// Load user accelerators from DIR: one folder per accelerator, each with an
    /// accelerator.toml (see docs/opencl-slots.md); invalid ones are refused and logged.
    #[arg(long, value_name = "DIR", help_heading = "Devices and models")]
    accelerators: Option<PathBuf>,
    /// Serve the ONNX models of the model repository DIR: NAME/config.toml and
    /// NAME/VERSION/model.onnx per model (see docs/inference.md); invalid ones are
    /// refused and logged.
    #[arg(long, value_name = "DIR", help_heading = "Devices and models")]
    models: Option<PathBuf>,
    /// Register with the registry at URL (several replicas: comma-separated), renew
    /// the lease, ask it before reconfiguring a slot, deregister when draining.
    #[arg(long, value_name = "URL", help_heading = "Cluster")]
    registry: Option<String>,
    /// This node's name at the registry (default: the host name).
    #[arg(long, value_name = "NAME", help_heading = "Cluster")]
    name: Option<String>,
    /// The IP other hosts reach this node at (default: the HTTP listen IP, when that
    /// is one address; required when the node listens on 0.0.0.0).
    #[arg(long, value_name = "IP", help_heading = "Cluster")]
    advertise: Option<IpAddr>,
    /// Network threads (0 = one per core). Every other bound (queues, bodies,
    /// connections, timeouts) is a key of the --config file.
    #[arg(long, value_name = "N", help_heading = "Limits")]
    io_threads: Option<usize>,
    /// Log level: off, error, warn, info, debug, trace, or a tracing filter of
    /// TARGET=LEVEL directives ("info,netaccel_node=debug").
    #[arg(long, value_name = "LEVEL", help_heading = "Logs")]
    log_level: Option<String>,
    /// Log format: text (the default) or json, one JSON object per line.
    #[arg(long, value_name = "FORMAT", help_heading = "Logs")]
    log_format: Option<LogFormat>,
}

/// `--grpc`: an address, or `None` for `off`.
#[derive(Clone, Copy, Debug)]
struct GrpcListen(Option<SocketAddr>);

fn grpc_listen(text: &str) -> Result<GrpcListen, String> {
    if text == "off" {
        return Ok(GrpcListen(None));
    }
    listen_addr(text)
        .map(|a| GrpcListen(Some(a)))
        .map_err(|e| format!("{e}, or off"))
}

/// A listen address: IP:PORT. A listener binds one IP, so a host name is refused with
/// the IP:PORT to write instead (`localhost` may stand for 127.0.0.1 or ::1).
fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let port = match text.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => port,
        _ => "PORT",
    };
    Err(format!(
        "{text:?} is not IP:PORT; a listener binds an IP address: 127.0.0.1:{port} for this \
         host only, 0.0.0.0:{port} for every interface, [::1]:{port} for IPv6 loopback"
    ))
}

fn main() -> ExitCode {
    // The node started again as an isolated OpenCL runtime process (see
    // `ocl_remote::service::isolate`): not a node, no command line of its own.
    let raw: Vec<String> = std::env::args().collect();
    if raw.get(1).map(String::as_str) == Some(ocl_remote::service::isolate::SUBCOMMAND) {
        return ocl_remote::service::isolate::runtime_main(&raw[2..]);
    }
    if raw.get(1).map(String::as_str) == Some("hash-token") {
        return credential::hash_token_command("netaccel-node");
    }
    let args = Args::parse();
    let mut config = match &args.config {
        Some(path) => match Config::from_file(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("netaccel-node: invalid configuration: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    if let Some(addr) = args.http {
        config.http = addr;
    }
    if let Some(addr) = args.rac {
        config.rac = addr;
    }
    if let Some(addr) = args.https {
        config.tls.https = Some(addr);
    }
    if let Some(addr) = args.rac_tls {
        config.tls.rac = Some(addr);
    }
    if let Some(addr) = args.grpc_tls {
        config.tls.grpc = Some(addr);
    }
    if let Some(addr) = args.opencl_tls {
        config.tls.opencl = Some(addr);
    }
    if let Some(path) = args.tls_cert {
        config.tls.cert = Some(path);
    }
    if let Some(path) = args.tls_key {
        config.tls.key = Some(path);
    }
    if let Some(path) = args.tls_client_ca {
        config.tls.client_ca = Some(path);
    }
    if args.tls_client_cert_optional {
        config.tls.client_certs = netaccel_node::net::tls::ClientCerts::Optional;
    }
    if let Some(GrpcListen(addr)) = args.grpc {
        config.grpc = addr;
    }
    if let Some(addr) = args.opencl {
        config.opencl.listen = Some(addr);
    }
    if let Some(dir) = args.accelerators {
        config.accelerators_dir = Some(dir);
    }
    if let Some(dir) = args.models {
        config.models_dir = Some(dir);
    }
    if let Some(n) = args.io_threads {
        config.io_threads = n;
    }
    if let Some(network) = args.network {
        config.network = network;
    }
    if let Some(level) = args.log_level {
        config.log_level = level;
    }
    if let Some(format) = args.log_format {
        config.log_format = format;
    }
    if let Some(url) = args.registry {
        config.registry = Some(url);
    }
    if let Some(name) = args.name {
        config.name = Some(name);
    }
    if let Some(ip) = args.advertise {
        config.advertise = Some(ip);
    }
    if let Err(e) = config.validate() {
        eprintln!("netaccel-node: invalid configuration: {e}");
        return ExitCode::from(2);
    }
    let stray = match netaccel_node::telemetry::logging::init(&config.log_level, config.log_format)
    {
        Ok(stray) => stray,
        Err(e) => {
            eprintln!("netaccel-node: cannot set up logging: {e}");
            return ExitCode::from(2);
        }
    };
    // Each way out gives stderr back (the lines still in its pipe logged) first.
    match netaccel_node::start(config) {
        Ok(running) => {
            if let Some(path) = args.config {
                // The tenants, from the file again on every SIGHUP.
                let reload = running.tenant_reloader();
                let again = move || {
                    reload(netaccel_node::config::Config::from_file(&path));
                };
                let listening = netaccel_node::server::on_sighup("tenant-reload", again, None);
                if let Err(e) = listening {
                    drop(stray);
                    eprintln!("netaccel-node: {e}");
                    return ExitCode::FAILURE;
                }
            }
            running.run_until_signal();
            drop(stray);
            ExitCode::SUCCESS
        }
        Err(e) => {
            drop(stray);
            eprintln!("netaccel-node: {e}");
            ExitCode::from(e.exit_status())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    #[test]
    fn a_host_name_for_a_listener_is_told_to_give_ip_port() {
        let args = Args::try_parse_from(["netaccel-node", "--http", "127.0.0.1:8080"]).unwrap();
        assert_eq!(args.http, Some("127.0.0.1:8080".parse().unwrap()));
        for flag in ["--http", "--rac", "--https", "--grpc"] {
            let e = Args::try_parse_from(["netaccel-node", flag, "localhost:8080"])
                .unwrap_err()
                .to_string();
            assert!(e.contains("is not IP:PORT"), "{flag}: {e}");
            assert!(e.contains("127.0.0.1:8080"), "{flag}: {e}");
            assert!(e.contains("0.0.0.0:8080"), "{flag}: {e}");
        }
        let e = Args::try_parse_from(["netaccel-node", "--grpc", "nope"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("or off"), "{e}");
    }
}
