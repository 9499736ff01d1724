// Command netaccel-dra-plugin is the kubelet plugin of the DRA driver netaccel.io: on
// each Kubernetes node it prepares the ResourceClaims whose netaccel devices the
// kube-scheduler allocated, so that the claim's containers get the binding in their
// environment.
//
// It is not the driver's publisher: netaccel devices are network-attached slots, and
// the registry (netaccel-registry --kubernetes) publishes every node's ResourceSlice
// and records each allocation as a pinned instance. This plugin only reads that
// record (GET /v1/functions/dra.<accelerator>/instances/dra-<claim uid>-<n>) and hands
// it to the container runtime as a CDI spec whose containerEdits set NETACCEL_*; a
// claim configured for a tenant (tenant.go) also gets NETACCEL_TENANT and the token of
// the tenant's Secret, NETACCEL_TENANT_TOKEN.
//
// Prepared claims are checkpointed to a file, so a restarted plugin answers the
// kubelet's repeated NodePrepareResources with what it prepared before and can still
// unprepare claims whose objects are gone.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// DriverName is the DRA driver whose allocations this plugin prepares; the registry
// publishes its ResourceSlices under the same name.
const DriverName = "netaccel.io"

type config struct {
	nodeName      string
	registry      string
	podRegistry   string
	kubeconfig    string
	pluginDir     string
	registrarDir  string
	cdiDir        string
	checkpoint    string
	healthAddr    string
	lookupTimeout time.Duration
	resolveWait   time.Duration
}

func parseFlags() config {
	var c config
	flag.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "the Kubernetes node this plugin serves (env NODE_NAME)")
	flag.StringVar(&c.registry, "registry", os.Getenv("NETACCEL_REGISTRY"), "the registry's HTTP API, e.g. http://netaccel-registry.netaccel.svc:7400 (env NETACCEL_REGISTRY)")
	flag.StringVar(&c.podRegistry, "pod-registry-url", "", "the registry as Pods reach it, put in NETACCEL_REGISTRY (default: --registry)")
	flag.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	flag.StringVar(&c.pluginDir, "plugin-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, DriverName), "directory of the plugin's DRA socket (created when missing)")
	flag.StringVar(&c.registrarDir, "registrar-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	flag.StringVar(&c.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI specs are written (a directory the container runtime reads)")
	flag.StringVar(&c.checkpoint, "checkpoint", "", "checkpoint file of prepared claims (default: checkpoint.json in --plugin-dir)")
	flag.StringVar(&c.healthAddr, "health", "", "serve GET /healthz on this address (e.g. :7480): 200 once registered with the kubelet")
	flag.DurationVar(&c.lookupTimeout, "registry-timeout", 5*time.Second, "timeout of one request to the registry")
	flag.DurationVar(&c.resolveWait, "record-wait", 30*time.Second, "how long a prepare waits for the registry to record a newly allocated claim")
	klog.InitFlags(nil)
	flag.Parse()
	if c.podRegistry == "" {
		c.podRegistry = c.registry
	}
	if c.checkpoint == "" {
		c.checkpoint = filepath.Join(c.pluginDir, "checkpoint.json")
	}
	return c
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func main() {
	c := parseFlags()
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "netaccel-dra-plugin: %v\n", err)
		os.Exit(1)
	}
}

func run(c config) error {
	if c.nodeName == "" || c.registry == "" {
		return errors.New("--node-name and --registry are required")
	}
	client, err := kubeClient(c.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	for _, dir := range []string{c.pluginDir, c.cdiDir, filepath.Dir(c.checkpoint)} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	ckpt, err := loadCheckpoint(c.checkpoint)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	driver := &driver{
		cdi:        cdiWriter{dir: c.cdiDir, tlsDir: filepath.Join(c.pluginDir, "tls")},
		checkpoint: ckpt,
		binding: registryClient{
			base:        c.registry,
			podRegistry: c.podRegistry,
			http:        &http.Client{Timeout: c.lookupTimeout},
		},
		claims: func(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
			return client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		resolveWait: c.resolveWait,
		cancel:      stop,
	}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(c.nodeName),
		kubeletplugin.PluginDataDirectoryPath(c.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(c.registrarDir),
	)
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	klog.InfoS("serving", "driver", DriverName, "node", c.nodeName, "prepared", len(ckpt.Claims))
	if c.healthAddr != "" {
		go serveHealth(c.healthAddr, helper)
	}
	<-ctx.Done()
	return nil
}

// serveHealth answers GET /healthz: 200 once the kubelet registered the plugin, 503
// before (or after it reported a registration error).
func serveHealth(addr string, helper *kubeletplugin.Helper) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		status := helper.RegistrationStatus()
		if status == nil || !status.PluginRegistered {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not registered with the kubelet")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	server := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	klog.ErrorS(server.ListenAndServe(), "health endpoint stopped")
}
