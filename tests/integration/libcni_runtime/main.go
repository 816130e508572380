// A minimal container runtime over libcni, the CNI project's own library (Debian's
// golang-github-appc-cni-dev): it runs a conflist's plugins for ADD, CHECK and DEL the way
// containerd and CRI-O do, result cache included, so the kit's plugin is judged by the
// library every real runtime links rather than by the kit's own reading of the spec.
//
// Usage, inside the network namespace the plugins run in (CNI_PATH names their directory):
//
//	libcni-runtime add|check|del CONFLIST NETNS CONTAINER_ID IFNAME CACHE_DIR
//
// ADD prints the result JSON; any error is printed as the plugin's error JSON when it is
// one, and exits 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// fail prints the plugin's error object (libcni wraps it with the plugin's name) or, for a
// failure of libcni's own, its message.
func fail(err error) {
	var pluginErr *types.Error
	if errors.As(err, &pluginErr) {
		out, _ := json.Marshal(pluginErr)
		fmt.Println(string(out))
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: libcni-runtime add|check|del CONFLIST NETNS CONTAINER_ID IFNAME CACHE_DIR")
		os.Exit(2)
	}
	command, confPath, netns, cid, ifname, cacheDir := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	list, err := libcni.ConfListFromFile(confPath)
	if err != nil {
		fail(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(os.Getenv("CNI_PATH")), cacheDir, nil)
	rt := &libcni.RuntimeConf{
		ContainerID: cid,
		NetNS:       netns,
		IfName:      ifname,
		// What containerd and CRI-O send for a Kubernetes pod.
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "libcni"}, {"K8S_POD_NAME", cid}},
	}
	ctx := context.Background()
	switch command {
	case "add":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		if err := result.Print(); err != nil {
			fail(err)
		}
	case "check":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	case "del":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown command", command)
		os.Exit(2)
	}
}
