// cnikit-cni, compiled: the same CNI plugin as cnikit/plugin/main.py, answer for answer.
//
// A runtime executes the plugin at every pod ADD and DEL, and most of the Python plugin's
// ~18 ms of CPU per run is the interpreter starting (7 ms of `python3 -IS -c pass` here, and
// the kernel's exec of a 7 MB binary). This build starts in ~1.5 ms. It speaks only to the
// daemon ("wiring": "daemon", the default); a netconf asking the plugin to wire the pod
// itself ("wiring": "plugin") is handed, stdin and all, to the Python plugin installed
// beside it as `<this name>-python`, which carries the wiring code.
//
// Both builds read constants.json (versions, defaults, every error's code and words), and
// tests/unit/plugin_cases.json, run against each build, says what each input gets.
// Standard library only: it builds offline with Debian's Go.
package main

import (
	"bytes"
	_ "embed"
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

//go:embed constants.json
var constantsJSON []byte

// The constants, read from the embedded file as plain JSON values: decoding it into a struct
// costs ~0.2 ms more of each run's CPU (encoding/json's reflection, cold in a fresh process).
var constants struct {
	Supported                                    []string
	CheckSince, DefaultSocket, Gateway, Gateway6 string
	Errors                                       map[string]any
}

// The file is fixed at build time: one that does not parse fails every run of that build,
// so the tests of plugin_cases.json fail it before any node gets it.
func init() {
	v, err := decode(constantsJSON)
	c, _ := v.(map[string]any)
	if err != nil || c == nil {
		panic(fmt.Sprintf("constants.json: %v", err))
	}
	for _, s := range c["supportedVersions"].([]any) {
		constants.Supported = append(constants.Supported, s.(string))
	}
	constants.CheckSince, constants.DefaultSocket = text(c, "checkSince"), text(c, "defaultSocket")
	constants.Gateway, constants.Gateway6 = text(c, "gateway"), text(c, "gateway6")
	constants.Errors = c["errors"].(map[string]any)
}

const callTimeout = 60 * time.Second

type cniError struct {
	code    int
	msg     string
	details string
}

func (e *cniError) Error() string { return e.msg }

// fail is the error constants.json names `key`, with details, its message's {name}s filled in
// from fill's name, value pairs.
func fail(key, details string, fill ...string) *cniError {
	e := constants.Errors[key].(map[string]any)
	code, _ := isInt(e["code"])
	for i := 0; i < len(fill); i += 2 {
		fill[i] = "{" + fill[i] + "}"
	}
	return &cniError{code: int(code), msg: strings.NewReplacer(fill...).Replace(text(e, "msg")), details: details}
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

// checkIfname is libcni's ValidateInterfaceName, i.e. what the kernel accepts (dev_valid_name).
func checkIfname(name string) *cniError {
	bad := len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/:")
	if bad || strings.IndexFunc(name, unicode.IsSpace) >= 0 {
		return fail("bad_ifname", name)
	}
	return nil
}

func env(name string, required bool) (string, *cniError) {
	v := os.Getenv(name)
	if required && v == "" {
		return "", fail("env_required", "", "name", name)
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

// isInt: a JSON number written as an integer, that fits an int64.
func isInt(v any) (int64, bool) {
	x, ok := v.(json.Number)
	if !ok || strings.ContainsAny(string(x), ".eE") {
		return 0, false
	}
	n, err := x.Int64()
	return n, err == nil
}

// text is d[key] when it is a string, else "".
func text(d map[string]any, key string) string {
	s, _ := d[key].(string)
	return s
}

func loadConf(raw []byte) (map[string]any, *cniError) {
	v, err := decode(raw)
	if err != nil {
		return nil, fail("not_json", err.Error())
	}
	conf, ok := v.(map[string]any)
	if !ok {
		return nil, fail("not_object", "")
	}
	ver := text(conf, "cniVersion")
	if ver == "" {
		return nil, fail("no_version", "")
	}
	if index(ver) < 0 {
		return nil, fail("unsupported_version", "", "version", ver,
			"supported", strings.Join(constants.Supported, ", "))
	}
	name := text(conf, "name")
	if name == "" {
		return nil, fail("no_name", "")
	}
	if !validName(name) {
		return nil, fail("bad_name", name)
	}
	if w, ok := conf["wiring"]; ok && w != "daemon" && w != "plugin" {
		return nil, fail("bad_wiring", "")
	}
	if m, ok := conf["mtu"]; ok {
		if n, isint := isInt(m); !isint || n < 68 || n > 65535 {
			return nil, fail("bad_mtu", "")
		}
	}
	return conf, nil
}

func index(ver string) int {
	for i, v := range constants.Supported {
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
		return nil, fail("bad_container_id", cid)
	}
	if err := checkIfname(ifname); err != nil {
		return nil, err
	}
	prefix := text(conf, "vethPrefix")
	if prefix == "" {
		prefix = "eni"
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
	if s := text(conf, "daemonSocket"); s != "" {
		return s
	}
	if s := os.Getenv("CNIKIT_DAEMON_SOCKET"); s != "" {
		return s
	}
	return constants.DefaultSocket
}

func call(sock string, req kv) (map[string]any, *cniError) {
	body, merr := marshal(req)
	if merr != nil {
		return nil, fail("internal", "", "reason", merr.Error())
	}
	conn, err := net.DialTimeout("unix", sock, callTimeout)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fail("daemon_down", sock)
		}
		return nil, fail("daemon_failed", sock, "reason", strerror(err))
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
		return nil, fail("daemon_failed", sock, "reason", strerror(err))
	}
	if len(bytes.TrimSpace(buf)) == 0 {
		return nil, fail("daemon_hung_up", sock)
	}
	v, _ := decode(buf)
	resp, isObj := v.(map[string]any)
	if !isObj {
		return nil, fail("daemon_garbled", sock)
	}
	if resp["ok"] != true {
		// The daemon's own code and words when it gave them, as an integer and a string.
		e := fail("daemon_refused", "")
		if code, ok := isInt(resp["code"]); ok && code >= 1 {
			e.code = int(code)
		}
		if words := text(resp, "error"); words != "" {
			e.msg = words
		}
		return nil, e
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
	ipStr := text(resp, "ip")
	if ipStr == "" {
		return nil, fail("daemon_no_ip", "")
	}
	gw, plen, family, dst := constants.Gateway, "/32", "4", "0.0.0.0/0"
	if strings.Contains(ipStr, ":") {
		gw, plen, family, dst = constants.Gateway6, "/128", "6", "::/0"
	}
	ip := kv{}.with("address", ipStr+plen).with("gateway", gw).with("interface", 1)
	ver := conf["cniVersion"].(string)
	if ver != "1.0.0" {
		ip = ip.with("version", family)
	}
	var dns any = kv{}
	if d, ok := conf["dns"].(map[string]any); ok {
		dns = d
	}
	ifname := os.Getenv("CNI_IFNAME")
	return kv{}.with("cniVersion", ver).
		with("interfaces", []any{
			kv{}.with("name", text(resp, "hostVeth")).with("mac", text(resp, "hostMac")),
			kv{}.with("name", ifname).with("mac", text(resp, "podMac")).with("sandbox", netns),
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
		return "", fail("no_prev_result", "")
	}
	ips, _ := prev["ips"].([]any)
	for _, ip := range ips {
		if m, ok := ip.(map[string]any); ok {
			if addr, _ := m["address"].(string); addr != "" {
				return strings.SplitN(addr, "/", 2)[0], nil
			}
		}
	}
	return "", fail("prev_result_no_ip", "")
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
		return 0, fail("no_python_build", self+"-python", "reason", strerror(err))
	}
	return 0, nil
}

func run() (code int) {
	ver := "1.0.0"
	out, err := func() (out any, err *cniError) {
		defer func() { // never a Go panic trace on the runtime's stdout
			if r := recover(); r != nil {
				err = fail("internal", "", "reason", fmt.Sprint(r))
			}
		}()
		cmd := os.Getenv("CNI_COMMAND")
		if cmd == "VERSION" {
			return kv{}.with("cniVersion", "1.0.0").with("supportedVersions", constants.Supported), nil
		}
		if cmd != "ADD" && cmd != "DEL" && cmd != "CHECK" {
			if cmd == "" {
				return nil, fail("no_command", "")
			}
			return nil, fail("unknown_command", cmd)
		}
		raw, rerr := io.ReadAll(os.Stdin)
		if rerr != nil {
			return nil, fail("read_config", "", "reason", strerror(rerr))
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
		if cmd == "CHECK" && index(ver) < index(constants.CheckSince) {
			return nil, fail("check_not_allowed", ver)
		}
		switch cmd {
		case "ADD":
			return cmdAdd(conf)
		case "DEL":
			return cmdDel(conf)
		}
		return cmdCheck(conf)
	}()
	if err == nil && out != nil {
		b, merr := marshal(out)
		if merr == nil {
			os.Stdout.Write(append(b, '\n'))
			return code
		}
		err = fail("internal", "", "reason", "cannot encode the result: "+merr.Error())
	}
	if err != nil {
		e := kv{}.with("cniVersion", ver).with("code", err.code).with("msg", err.msg)
		if err.details != "" {
			e = e.with("details", err.details)
		}
		b, _ := marshal(e)
		os.Stdout.Write(append(b, '\n'))
		return 1
	}
	return code
}

func main() {
	os.Exit(run())
}
