// Command envtest runs a real kube-apiserver (k8s.io/kubernetes) over an embedded etcd on
// loopback, with its own CA, a static admin token and RBAC authorisation on. It installs the
// CRDs found in --crds, waits until they are Established, writes a kubeconfig atomically and
// prints exactly one line to stdout:
//
//	ready kubeconfig=<path> server=<url>
//
// It runs until SIGINT or SIGTERM, then stops the API server and etcd. State (key material,
// etcd data, kubeconfig) lives in --dir, so a restart with the same --dir and --port serves the
// same data at the same address.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	dir := flag.String("dir", "", "state directory (created with mode 0700)")
	crds := flag.String("crds", "", "directory of CRD YAML files to install (optional)")
	port := flag.Int("port", 0, "secure port of the API server (0: a free loopback port)")
	etcdPort := flag.Int("etcd-port", 0, "client port of etcd (0: a free loopback port)")
	stdinEOF := flag.Bool("exit-on-stdin-eof", false, "shut down when standard input closes (the parent died)")
	noWatchCache := flag.Bool("no-watch-cache", false, "serve every watch from etcd (--watch-cache=false): "+
		"a watch resumed after a restart from a version seen before it gets every event since, "+
		"where the watch cache, which starts at the restart's revision, answers 410 Gone")
	flag.Parse()
	if *dir == "" {
		fail("--dir is required")
	}
	if *stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			// Same path as Ctrl-C: the API server's own handler shuts it down gracefully.
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		}()
	}
	if err := run(*dir, *crds, *port, *etcdPort, *noWatchCache); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "envtest: "+msg)
	os.Exit(1)
}

func run(dir, crdDir string, port, etcdPort int, noWatchCache bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	m, err := ensureMaterial(dir)
	if err != nil {
		return fmt.Errorf("key material: %w", err)
	}
	if port == 0 {
		if port, err = freePort(); err != nil {
			return err
		}
	}
	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"), etcdPort)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	cmd := app.NewAPIServerCommand()
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + m.servingCert,
		"--tls-private-key-file=" + m.servingKey,
		"--client-ca-file=" + m.caCert,
		fmt.Sprintf("--secure-port=%d", port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + m.saPub,
		"--service-account-signing-key-file=" + m.saKey,
		"--token-auth-file=" + m.tokenFile,
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		"--v=0",
	}
	if noWatchCache {
		args = append(args, "--watch-cache=false")
	}
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- prepare(ctx, dir, crdDir, server, m) }()

	select {
	case err := <-done:
		return fmt.Errorf("kube-apiserver exited before it was ready: %v", err)
	case err := <-ready:
		if err != nil {
			return err
		}
	}
	fmt.Printf("ready kubeconfig=%s server=%s\n", filepath.Join(dir, "kubeconfig"), server)
	os.Stdout.Sync()
	// The API server command installs its own SIGINT/SIGTERM handler and returns on the first
	// signal (a second one exits the process at once).
	if err := <-done; err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	return nil
}

// prepare waits for /readyz, installs the CRDs and writes the kubeconfig.
func prepare(ctx context.Context, dir, crdDir, server string, m *material) error {
	cfg := restConfig(server, m)
	if err := waitReady(ctx, cfg); err != nil {
		return err
	}
	if crdDir != "" {
		if err := installCRDs(ctx, cfg, crdDir); err != nil {
			return fmt.Errorf("CRDs: %w", err)
		}
	}
	return writeKubeconfig(filepath.Join(dir, "kubeconfig"), server, m)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
