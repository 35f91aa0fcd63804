package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

func restConfig(server string, m *material) *rest.Config {
	return &rest.Config{
		Host:            server,
		BearerToken:     m.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: m.caPEM},
		QPS:             100,
		Burst:           200,
	}
}

// waitReady polls /readyz until it answers ok and the default namespace exists.
func waitReady(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			if _, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("API server not ready: %v (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// installCRDs creates (or updates) every CRD in dir and waits until each is Established.
func installCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	cs, err := apiext.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var crd apiextv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(f), err)
		}
		api := cs.ApiextensionsV1().CustomResourceDefinitions()
		existing, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, &crd, metav1.CreateOptions{})
		case err == nil:
			crd.ResourceVersion = existing.ResourceVersion
			_, err = api.Update(ctx, &crd, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("%s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		if err := waitEstablished(ctx, cs, name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, cs *apiext.Clientset, name string) error {
	for {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not Established: %v", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// writeKubeconfig writes the admin kubeconfig atomically (temp file, then rename).
func writeKubeconfig(path, server string, m *material) error {
	doc := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "envtest", "cluster": map[string]any{
			"server": server, "certificate-authority": m.caCert,
		}}},
		"users": []any{map[string]any{"name": "envtest-admin", "user": map[string]any{
			"token": m.token,
		}}},
		"contexts": []any{map[string]any{"name": "envtest", "context": map[string]any{
			"cluster": "envtest", "user": "envtest-admin", "namespace": "default",
		}}},
		"current-context": "envtest",
	}
	raw, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kubeconfig-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
