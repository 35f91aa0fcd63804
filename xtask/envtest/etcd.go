package main

import (
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd runs a single-member etcd on loopback with its data in dataDir (mode 0700).
// fsync is off: this is a test server, and speed matters more than durability across a crash
// of the machine.
func startEtcd(dataDir string, clientPort int) (*embed.Etcd, string, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, "", err
	}
	var err error
	if clientPort == 0 {
		if clientPort, err = freePort(); err != nil {
			return nil, "", err
		}
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}

	cfg := embed.NewConfig()
	cfg.Name = "envtest"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", fmt.Errorf("not ready within 60s")
	}
}
