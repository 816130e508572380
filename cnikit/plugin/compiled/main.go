// cnikit-cni, compiled: the same CNI plugin as cnikit/plugin/main.py, answer for answer.
//
// A runtime executes the plugin at every pod ADD and DEL, and most of the Python plugin's
// ~18 ms of CPU per run is the interpreter starting (7 ms of `python3 -IS -c pass` here, and
// the kernel's exec of a 7 MB binary). This build starts in ~1.5 ms. It speaks only to the
// daemon ("wiring": "daemon", the default); a netconf asking the plugin to wire the pod
// itself ("wiring": "plugin") is handed, stdin and all, to the Python plugin installed
// beside it as `<this name>-python`, which carries the wiring code.
//
// Every check and message mirrors main.py; tests/unit/test_plugin_cli.py runs the same
// cases against both builds. Standard library only: it builds offline with Debian's Go.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode"
)

var supported = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0"}

const (
	checkSince    = "0.4.0" // CHECK came with spec 0.4.0: older configs get code 1, as libcni's skel
	defaultSocket = "/run/cnikit/daemon/ipamd.sock"
	gateway       = "169.254.1.1"
	gateway6      = "fe80::1" // an IPv6 pod's next hop (main.py's GATEWAY6)
	callTimeout   = 60 * time.Second
)

// CNI spec error codes.
const (
	eVersion  = 1
	eField    = 2
	eEnv      = 4
	eIO       = 5
	eDecode   = 6
	eConfig   = 7
	eTryAgain = 11
)

type cniError struct {
	code    int
	msg     string
	details string
}

func (e *cniError) Error() string { return e.msg }

func fail(code int, msg string, details ...string) *cniError {
	e := &cniError{code: code, msg: msg}
	if len(details) > 0 {
		e.details = details[0]
	}
	return e
}

// validName is SPEC.md's rule for a container ID and a network name, as libcni checks it:
// ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '_' && c != '.' && c != '-')) {
			return false
		}
	}
	return true
}

// isSpace is Python's str.isspace for one rune (it counts \x1c-\x1f, Go's unicode does not).
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}

// checkIfname is libcni's ValidateInterfaceName, i.e. what the kernel accepts (dev_valid_name).
func checkIfname(name string) *cniError {
	bad := len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/:")
	for _, r := range name {
		bad = bad || isSpace(r)
	}
	if bad {
		return fail(eEnv, fmt.Sprintf("interface name %s is not one the kernel accepts", pyRepr(name)), name)
	}
	return nil
}

// pyRepr quotes as Python's repr does a str: these messages name what the runtime sent.
func pyRepr(s string) string {
	q := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	var b strings.Builder
	b.WriteRune(q)
	for _, r := range s {
		switch {
		case r == q || r == '\\':
			b.WriteRune('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(q)
	return b.String()
}

func env(name string, required bool) (string, *cniError) {
	v := os.Getenv(name)
	if required && v == "" {
		return "", fail(eEnv, name+" is required")
	}
	return v, nil
}

func cniArgs(raw string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(raw, ";") {
		if k, v, ok := strings.Cut(part, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// truthy is Python's bool() of a decoded JSON value: `conf.get(k) or default`.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

func decode(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("extra data after the JSON value")
	}
	return v, nil
}

// isInt is Python's isinstance(v, int) for a decoded JSON value (true and false count).
func isInt(v any) (int64, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return 0, false
		}
		n, err := x.Int64()
		return n, err == nil
	}
	return 0, false
}

func loadConf(raw []byte) (map[string]any, *cniError) {
	v, err := decode(raw)
	if err != nil {
		return nil, fail(eDecode, "network configuration is not JSON", err.Error())
	}
	conf, ok := v.(map[string]any)
	if !ok {
		return nil, fail(eDecode, "network configuration is not a JSON object")
	}
	ver, _ := conf["cniVersion"].(string)
	if ver == "" {
		return nil, fail(eConfig, "cniVersion is required")
	}
	if index(ver) < 0 {
		return nil, fail(eVersion, fmt.Sprintf("cniVersion %s is not supported (%s)", ver,
			strings.Join(supported, ", ")))
	}
	name, _ := conf["name"].(string)
	if name == "" {
		return nil, fail(eConfig, "missing network name")
	}
	if !validName(name) {
		return nil, fail(eConfig, "invalid characters found in network name", name)
	}
	if w, ok := conf["wiring"]; ok && w != "daemon" && w != "plugin" {
		return nil, fail(eField, `wiring must be "daemon" or "plugin"`)
	}
	if m, ok := conf["mtu"]; ok {
		if n, isint := isInt(m); !isint || n < 68 || n > 65535 {
			return nil, fail(eField, "mtu must be an integer in 68..65535")
		}
	}
	return conf, nil
}

func index(ver string) int {
	for i, v := range supported {
		if v == ver {
			return i
		}
	}
	return -1
}

// kv keeps a JSON object's keys in the order written, as the Python plugin's dicts do.
type kv []struct {
	k string
	v any
}

func (o kv) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range o {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(p.k)
		v, err := marshal(p.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o kv) with(k string, v any) kv {
	return append(o, struct {
		k string
		v any
	}{k, v})
}

func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func request(cmd string, conf map[string]any) (kv, *cniError) {
	args := cniArgs(os.Getenv("CNI_ARGS"))
	cid, err := env("CNI_CONTAINERID", true)
	if err != nil {
		return nil, err
	}
	ifname, err := env("CNI_IFNAME", true)
	if err != nil {
		return nil, err
	}
	if !validName(cid) {
		return nil, fail(eEnv, "invalid characters in containerID", cid)
	}
	if err := checkIfname(ifname); err != nil {
		return nil, err
	}
	var prefix any = "eni"
	if truthy(conf["vethPrefix"]) {
		prefix = conf["vethPrefix"]
	}
	meta := kv{}
	if v := args["K8S_POD_NAMESPACE"]; v != "" {
		meta = meta.with("k8sPodNamespace", v)
	}
	if v := args["K8S_POD_NAME"]; v != "" {
		meta = meta.with("k8sPodName", v)
	}
	req := kv{}.with("cmd", cmd).with("network", conf["name"]).with("containerID", cid).
		with("ifName", ifname).with("podNamespace", args["K8S_POD_NAMESPACE"]).
		with("podName", args["K8S_POD_NAME"]).with("vethPrefix", prefix).with("metadata", meta)
	if m, ok := conf["mtu"]; ok {
		req = req.with("mtu", m)
	}
	// The daemon wires the pod: it needs the namespace (main.py's "wiring": "daemon").
	return req.with("netns", os.Getenv("CNI_NETNS")), nil
}

func socketPath(conf map[string]any) string {
	if s, _ := conf["daemonSocket"].(string); s != "" {
		return s
	}
	if s := os.Getenv("CNIKIT_DAEMON_SOCKET"); s != "" {
		return s
	}
	return defaultSocket
}

func call(sock string, req kv) (map[string]any, *cniError) {
	body, merr := marshal(req)
	if merr != nil {
		return nil, fail(999, "internal error: "+merr.Error())
	}
	conn, err := net.DialTimeout("unix", sock, callTimeout)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fail(eTryAgain, "cnikit daemon is not running", sock)
		}
		return nil, fail(eTryAgain, "cnikit daemon: "+strerror(err), sock)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(callTimeout))
	var buf []byte
	if _, err = conn.Write(append(body, '\n')); err == nil {
		chunk := make([]byte, 65536)
		for !bytes.HasSuffix(buf, []byte("\n")) {
			n, rerr := conn.Read(chunk)
			buf = append(buf, chunk[:n]...)
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				err = rerr
				break
			}
		}
	}
	if err != nil {
		return nil, fail(eTryAgain, "cnikit daemon: "+strerror(err), sock)
	}
	v, derr := decode(buf)
	resp, isObj := v.(map[string]any)
	if derr != nil || !isObj {
		return nil, fail(eTryAgain, "cnikit daemon closed the connection", sock)
	}
	if !truthy(resp["ok"]) {
		code := eIO
		if n, ok := resp["code"].(json.Number); ok && truthy(n) {
			if f, ferr := n.Float64(); ferr == nil {
				code = int(f)
			}
		}
		msg := "daemon error"
		if truthy(resp["error"]) {
			msg = fmt.Sprint(resp["error"])
		}
		return nil, fail(code, msg)
	}
	return resp, nil
}

// strerror is the system's words for an error without Go's "dial unix ...:" prefix, as
// Python's e.strerror gives them.
func strerror(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func cmdAdd(conf map[string]any) (any, *cniError) {
	netns, err := env("CNI_NETNS", true)
	if err != nil {
		return nil, err
	}
	req, err := request("add", conf)
	if err != nil {
		return nil, err
	}
	resp, err := call(socketPath(conf), req)
	if err != nil {
		return nil, err
	}
	ipStr, ok := resp["ip"].(string)
	if !ok {
		return nil, fail(999, "internal error: KeyError: 'ip'")
	}
	gw, plen, family, dst := gateway, "/32", "4", "0.0.0.0/0"
	if strings.Contains(ipStr, ":") {
		gw, plen, family, dst = gateway6, "/128", "6", "::/0"
	}
	ip := kv{}.with("address", ipStr+plen).with("gateway", gw).with("interface", 1)
	ver := conf["cniVersion"].(string)
	if ver != "1.0.0" {
		ip = ip.with("version", family)
	}
	var dns any = kv{}
	if truthy(conf["dns"]) {
		dns = conf["dns"]
	}
	ifname := os.Getenv("CNI_IFNAME")
	return kv{}.with("cniVersion", ver).
		with("interfaces", []any{
			kv{}.with("name", str(resp["hostVeth"])).with("mac", str(resp["hostMac"])),
			kv{}.with("name", ifname).with("mac", str(resp["podMac"])).with("sandbox", netns),
		}).
		with("ips", []any{ip}).
		with("routes", []any{kv{}.with("dst", dst).with("gw", gw)}).
		with("dns", dns), nil
}

func cmdDel(conf map[string]any) (any, *cniError) {
	req, err := request("del", conf)
	if err != nil {
		return nil, err
	}
	// The prevResult's address as a hint (main.py's cmd_del): DEL frees by sandbox.
	if ip, perr := prevIP(conf); perr == nil {
		req = req.with("prevIp", ip)
	}
	_, err = call(socketPath(conf), req)
	return nil, err
}

func prevIP(conf map[string]any) (string, *cniError) {
	prev, ok := conf["prevResult"].(map[string]any)
	if !ok {
		return "", fail(eConfig, "CHECK needs prevResult")
	}
	ips, _ := prev["ips"].([]any)
	for _, ip := range ips {
		if m, ok := ip.(map[string]any); ok {
			if addr, _ := m["address"].(string); addr != "" {
				return strings.SplitN(addr, "/", 2)[0], nil
			}
		}
	}
	return "", fail(eConfig, "prevResult holds no IP")
}

func cmdCheck(conf map[string]any) (any, *cniError) {
	if _, err := env("CNI_NETNS", true); err != nil {
		return nil, err
	}
	req, err := request("check", conf)
	if err != nil {
		return nil, err
	}
	ip, err := prevIP(conf)
	if err != nil {
		return nil, err
	}
	_, err = call(socketPath(conf), req.with("expectIp", ip))
	return nil, err
}

// wiresItself: the netconf asks the plugin to wire the pod, which the Python build does.
func wiresItself(raw []byte) bool {
	var probe struct {
		Wiring any `json:"wiring"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.Wiring == "plugin"
}

// delegate runs `<this plugin>-python` with the same environment and stdin, as its own.
func delegate(raw []byte) (int, *cniError) {
	self := os.Args[0]
	if !strings.Contains(self, "/") {
		if exe, err := os.Executable(); err == nil {
			self = exe
		}
	}
	cmd := exec.Command(self + "-python")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(raw), os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 0, fail(eIO, `"wiring": "plugin" needs the Python plugin beside this one: `+
			strerror(err), self+"-python")
	}
	return 0, nil
}

func run() (code int) {
	ver := "1.0.0"
	out, err := func() (out any, err *cniError) {
		defer func() { // never a Go panic trace on the runtime's stdout
			if r := recover(); r != nil {
				err = fail(999, fmt.Sprintf("internal error: %v", r))
			}
		}()
		cmd := os.Getenv("CNI_COMMAND")
		if cmd == "VERSION" {
			return kv{}.with("cniVersion", "1.0.0").with("supportedVersions", supported), nil
		}
		if cmd != "ADD" && cmd != "DEL" && cmd != "CHECK" {
			if cmd == "" {
				return nil, fail(eEnv, "CNI_COMMAND is required")
			}
			return nil, fail(eEnv, "unknown CNI_COMMAND "+pyRepr(cmd))
		}
		raw, rerr := io.ReadAll(os.Stdin)
		if rerr != nil {
			return nil, fail(eIO, "reading the network configuration: "+strerror(rerr))
		}
		conf, err := loadConf(raw)
		if err != nil {
			return nil, err
		}
		ver = conf["cniVersion"].(string)
		if wiresItself(raw) {
			c, err := delegate(raw)
			code = c
			return nil, err
		}
		if cmd == "CHECK" && index(ver) < index(checkSince) {
			return nil, fail(eVersion, "config version does not allow CHECK", ver)
		}
		switch cmd {
		case "ADD":
			return cmdAdd(conf)
		case "DEL":
			return cmdDel(conf)
		}
		return cmdCheck(conf)
	}()
	if err != nil {
		e := kv{}.with("cniVersion", ver).with("code", err.code).with("msg", err.msg)
		if err.details != "" {
			e = e.with("details", err.details)
		}
		b, _ := marshal(e)
		os.Stdout.Write(append(b, '\n'))
		return 1
	}
	if out != nil {
		b, merr := marshal(out)
		if merr != nil {
			os.Stdout.Write([]byte(`{"cniVersion": "` + ver + `", "code": 999, "msg": "internal error: ` +
				"cannot encode the result\"}\n"))
			return 1
		}
		os.Stdout.Write(append(b, '\n'))
	}
	return code
}

func main() {
	os.Exit(run())
}
