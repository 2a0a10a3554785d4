// Command nodeagent serves the kubelet API of the real stack's kwok nodes (exec, attach, logs,
// port-forward) for pods whose containers the pod runner (../podrunner.py) runs as local
// processes. The protocols are the kubelet's own code: k8s.io/cri-streaming's remotecommand
// and portforward packages, which kube-apiserver reaches over SPDY (and WebSocket).
//
// Why not kwok's own server: kwok v0.8.0 answers a command that exits non-zero with reason
// InternalError ("cmd wait: ...: exit status N") instead of NonZeroExitCode, because
// sigs.k8s.io/kwok/pkg/utils/exec wraps *exec.ExitError with %w while
// k8s.io/cri-streaming/pkg/streaming/remotecommand/exec.go type-asserts on
// k8s.io/utils/exec.ExitError. A real kubelet reports the exit code; so does this agent.
//
// A pod's state lives in RUN/pods/<namespace>_<name>_<uid>/ (written by the pod runner):
// containers/<container>-<attempt>/spec.json holds the argv, env and working directory of one
// run of a container, result.json its exit, logs/<container>.log its CRI-format log; ns.json
// names the pod's mount namespace (its holder process and namespace id) when it has volumes:
// an exec enters it (nsenter --mount), so it sees the pod's mounts as its containers do.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

const (
	idleTimeout           = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

type agent struct {
	podsDir string
	nsenter string // nsenter's path; "" when not installed (pods with volumes cannot be exec'd)
}

// podNS is ns.json of a pod directory (written by ../podvolumes.py).
type podNS struct {
	Holder int    `json:"holder"`
	Mnt    string `json:"mnt"`
}

// mountNS returns "/proc/PID/ns/mnt" of a live process in the pod's mount namespace (its
// holder, else a container's process), "" when the pod has no namespace of its own.
func mountNS(podDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(podDir, "ns.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var ns podNS
	if err := json.Unmarshal(data, &ns); err != nil {
		return "", err
	}
	candidates := []string{strconv.Itoa(ns.Holder)}
	pids, _ := filepath.Glob(filepath.Join(podDir, "containers", "*", "child.pid"))
	for _, p := range pids {
		if b, err := os.ReadFile(p); err == nil {
			candidates = append(candidates, strings.TrimSpace(string(b)))
		}
	}
	for _, pid := range candidates {
		path := "/proc/" + pid + "/ns/mnt"
		if link, err := os.Readlink(path); err == nil && link == ns.Mnt {
			return path, nil
		}
	}
	return "", fmt.Errorf("the mount namespace of the pod (%s) is gone", ns.Mnt)
}

type containerSpec struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env"`
	Cwd  string            `json:"cwd"`
	Log  string            `json:"log"`
}

// podDir finds RUN/pods/<ns>_<name>_<uid>; with several (a pod name reused), the given uid or
// the newest.
func (a *agent) podDir(namespace, name, uid string) (string, error) {
	if uid != "" {
		dir := filepath.Join(a.podsDir, namespace+"_"+name+"_"+uid)
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob(filepath.Join(a.podsDir, namespace+"_"+name+"_*"))
	if len(matches) == 0 {
		return "", fmt.Errorf("pod %s/%s is not running on this node", namespace, name)
	}
	sort.Slice(matches, func(i, j int) bool { return mtime(matches[i]).After(mtime(matches[j])) })
	return matches[0], nil
}

func mtime(path string) time.Time {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// attempts lists containers/<container>-<N> of one container, newest first.
func attempts(podDir, container string) []string {
	matches, _ := filepath.Glob(filepath.Join(podDir, "containers", container+"-*"))
	type run struct {
		dir string
		n   int
	}
	var runs []run
	for _, m := range matches {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(m), container+"-"))
		if err == nil {
			runs = append(runs, run{m, n})
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].n > runs[j].n })
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.dir
	}
	return out
}

func readSpec(dir string) (*containerSpec, error) {
	data, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		return nil, err
	}
	var spec containerSpec
	return &spec, json.Unmarshal(data, &spec)
}

func terminated(runDir string) bool {
	_, err := os.Stat(filepath.Join(runDir, "result.json"))
	return err == nil
}

// split "name/namespace" (how the handlers below pass the pod to the streaming code)
func splitPod(podName string) (string, string) {
	ns, name, _ := strings.Cut(podName, "/")
	return ns, name
}

func (a *agent) container(podName, uid, container string) (string, *containerSpec, error) {
	ns, name := splitPod(podName)
	dir, err := a.podDir(ns, name, uid)
	if err != nil {
		return "", nil, err
	}
	// The pod runner reports a container running as it starts it: its run directory may land a
	// moment after the status that made a client exec into it.
	runs := attempts(dir, container)
	for wait := 0; len(runs) == 0 && wait < 50; wait++ {
		time.Sleep(100 * time.Millisecond)
		runs = attempts(dir, container)
	}
	if len(runs) == 0 {
		return "", nil, fmt.Errorf("container %q of pod %s/%s has not started", container, ns, name)
	}
	spec, err := readSpec(runs[0])
	if err != nil {
		return "", nil, fmt.Errorf("container %q of pod %s/%s: %v", container, ns, name, err)
	}
	if terminated(runs[0]) {
		return "", nil, fmt.Errorf("container %q of pod %s/%s is not running", container, ns, name)
	}
	return runs[0], spec, nil
}

// ExecInContainer runs cmd in the container's directory with its environment, as a process
// of the pod (its environment carries the pod's marker, so deleting the pod ends it too).
func (a *agent) ExecInContainer(ctx context.Context, podName, uid, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	if tty {
		return errors.New("a terminal (tty) is not supported by the real stack's node agent")
	}
	runDir, spec, err := a.container(podName, uid, container)
	if err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	ns, err := mountNS(filepath.Dir(filepath.Dir(runDir)))
	if err != nil {
		return err
	}
	var proc *exec.Cmd
	if ns == "" {
		proc = exec.Command(cmd[0], cmd[1:]...)
		proc.Dir = spec.Cwd
		if path, ok := spec.Env["PATH"]; ok && !strings.Contains(cmd[0], "/") {
			if found, err := lookPath(cmd[0], "", path); err == nil {
				proc.Path = found
			}
		}
	} else {
		// the command is looked up in the pod's namespace (through /proc/PID/root), then
		// nsenter enters it, changes to the working directory and execs the command
		if a.nsenter == "" {
			return errors.New("nsenter is not installed: cannot enter the pod's mount namespace")
		}
		name := cmd[0]
		if path, ok := spec.Env["PATH"]; ok && !strings.Contains(name, "/") {
			root := strings.TrimSuffix(ns, "/ns/mnt") + "/root"
			found, err := lookPath(name, root, path)
			if err != nil {
				return fmt.Errorf("failed to exec in container: %v", &exec.Error{Name: name, Err: exec.ErrNotFound})
			}
			name = found
		}
		args := append([]string{"--mount=" + ns, "--wd=" + spec.Cwd, "--", name}, cmd[1:]...)
		proc = exec.Command(a.nsenter, args...)
	}
	proc.Env = environ(spec.Env)
	proc.Stdout, proc.Stderr = out, errOut
	proc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var stdin io.WriteCloser
	if in != nil {
		if stdin, err = proc.StdinPipe(); err != nil {
			return err
		}
	}
	if err := proc.Start(); err != nil {
		// what a container runtime says for a missing binary: exit code 126/127 comes from a shell
		return fmt.Errorf("failed to exec in container: %v", err)
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	err = proc.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code := exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

func environ(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// lookPath finds file in the PATH directories as seen under root ("" for the agent's own).
func lookPath(file, root, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		candidate := filepath.Join(dir, file)
		if st, err := os.Stat(root + candidate); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return candidate, nil
		}
	}
	return "", exec.ErrNotFound
}

// AttachContainer streams what the container writes from now on (its log), until it ends.
func (a *agent) AttachContainer(ctx context.Context, podName, uid, container string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	runDir, spec, err := a.container(podName, uid, container)
	if err != nil {
		return err
	}
	var offset int64
	if st, err := os.Stat(spec.Log); err == nil {
		offset = st.Size() // what the container writes from now on
	}
	return followFrom(ctx, spec.Log, offset, runDir, func(e logEntry) error {
		w := io.Writer(out)
		if e.stream == "stderr" && errOut != nil {
			w = errOut
		}
		if w == nil {
			return nil
		}
		_, err := w.Write(e.data)
		return err
	})
}

// PortForward connects the stream to the port on the pod's (host) network.
func (a *agent) PortForward(ctx context.Context, podName, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), 10*time.Second)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %s: %v", port, podName, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); closeWrite(conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

func closeWrite(conn net.Conn) {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}

// parseCRI splits "TIMESTAMP STREAM P|F CONTENT" (the CRI log format).
func parseCRI(line []byte) (ts time.Time, stream string, partial bool, content []byte, ok bool) {
	parts := strings.SplitN(string(line), " ", 4)
	if len(parts) < 3 {
		return
	}
	ts, err := time.Parse(time.RFC3339Nano, parts[0])
	if err != nil {
		return
	}
	if len(parts) == 4 {
		content = []byte(parts[3])
	}
	return ts, parts[1], parts[2] == "P", content, true
}

type logEntry struct {
	ts     time.Time
	stream string
	data   []byte
}

// containerLogs serves GET /containerLogs/{ns}/{pod}/{container} as the kubelet does:
// follow, previous, tailLines, timestamps, sinceSeconds, sinceTime, limitBytes.
func (a *agent) containerLogs(w http.ResponseWriter, r *http.Request, ns, name, container string) {
	q := r.URL.Query()
	dir, err := a.podDir(ns, name, "")
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	runs := attempts(dir, container)
	previous := q.Get("previous") == "true"
	want := 0
	if previous {
		want = 1
	}
	if len(runs) <= want {
		msg := fmt.Sprintf("container %q in pod %q is waiting to start", container, name)
		if previous {
			msg = fmt.Sprintf("previous terminated container %q in pod %q not found", container, name)
		}
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	runDir := runs[want]
	logPath := filepath.Join(dir, "logs", container+".log")
	if previous {
		logPath = filepath.Join(dir, "logs", container+".previous.log")
	}
	if spec, err := readSpec(runDir); err == nil && spec.Log != "" && !previous {
		logPath = spec.Log
	}
	timestamps := q.Get("timestamps") == "true"
	var since time.Time
	if s := q.Get("sinceSeconds"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			since = time.Now().Add(-time.Duration(n) * time.Second)
		}
	}
	if s := q.Get("sinceTime"); s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			since = t
		}
	}
	limit := int64(-1)
	if s := q.Get("limitBytes"); s != "" {
		limit, _ = strconv.ParseInt(s, 10, 64)
	}
	tail := -1
	if s := q.Get("tailLines"); s != "" {
		tail, _ = strconv.Atoi(s)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	var written int64
	emit := func(e logEntry) error {
		if !since.IsZero() && e.ts.Before(since) {
			return nil
		}
		data := e.data
		if timestamps {
			data = append([]byte(e.ts.Format(time.RFC3339Nano)+" "), data...)
		}
		if limit >= 0 && written+int64(len(data)) > limit {
			data = data[:limit-written]
		}
		n, err := w.Write(data)
		written += int64(n)
		if flusher != nil {
			flusher.Flush()
		}
		if err != nil || (limit >= 0 && written >= limit) {
			return io.EOF
		}
		return nil
	}
	entries := readAll(logPath)
	if tail >= 0 && len(entries) > tail {
		entries = entries[len(entries)-tail:]
	}
	for _, e := range entries {
		if emit(e) != nil {
			return
		}
	}
	if q.Get("follow") != "true" || previous || terminated(runDir) {
		return
	}
	f, err := os.Open(logPath)
	if err != nil {
		return
	}
	size, _ := f.Seek(0, io.SeekEnd)
	f.Close()
	_ = followFrom(r.Context(), logPath, size, runDir, emit)
}

func readAll(path string) []logEntry {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []logEntry
	for _, line := range strings.Split(string(data), "\n") {
		if ts, stream, partial, content, ok := parseCRI([]byte(line)); ok {
			if !partial {
				content = append(content, '\n')
			}
			out = append(out, logEntry{ts, stream, content})
		}
	}
	return out
}

func followFrom(ctx context.Context, path string, offset int64, runDir string, emit func(logEntry) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return err
	}
	reader := bufio.NewReader(f)
	var pending []byte
	for {
		chunk, err := reader.ReadBytes('\n')
		pending = append(pending, chunk...)
		if err == nil {
			line := pending[:len(pending)-1]
			pending = nil
			if ts, stream, partial, content, ok := parseCRI(line); ok {
				if !partial {
					content = append(content, '\n')
				}
				if emit(logEntry{ts, stream, content}) != nil {
					return nil
				}
			}
			continue
		}
		if terminated(runDir) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (a *agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	stream := func(kind string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			// /exec/{ns}/{pod}/{container} or /exec/{ns}/{pod}/{uid}/{container}
			parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")[1:]
			var ns, name, uid, container string
			switch {
			case kind == "portForward" && len(parts) == 2:
				ns, name = parts[0], parts[1]
			case kind == "portForward" && len(parts) == 3:
				ns, name, uid = parts[0], parts[1], parts[2]
			case kind != "portForward" && len(parts) == 3:
				ns, name, container = parts[0], parts[1], parts[2]
			case kind != "portForward" && len(parts) == 4:
				ns, name, uid, container = parts[0], parts[1], parts[2], parts[3]
			default:
				http.NotFound(w, r)
				return
			}
			pod := ns + "/" + name
			switch kind {
			case "exec", "attach":
				opts, err := remotecommand.NewOptions(r)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				if kind == "exec" {
					cmd := r.URL.Query()["command"]
					remotecommand.ServeExec(w, r, a, pod, uid, container, cmd, opts, idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
				} else {
					remotecommand.ServeAttach(w, r, a, pod, uid, container, opts, idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
				}
			case "portForward":
				opts, err := portforward.NewV4Options(r)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				portforward.ServePortForward(w, r, a, pod, uid, opts, idleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
			}
		}
	}
	mux.HandleFunc("/exec/", stream("exec"))
	mux.HandleFunc("/attach/", stream("attach"))
	mux.HandleFunc("/portForward/", stream("portForward"))
	mux.HandleFunc("/containerLogs/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) != 4 {
			http.NotFound(w, r)
			return
		}
		a.containerLogs(w, r, parts[1], parts[2], parts[3])
	})
	return mux
}

func main() {
	addr := flag.String("address", "127.0.0.1:10250", "listen address")
	cert := flag.String("tls-cert-file", "", "serving certificate")
	key := flag.String("tls-private-key-file", "", "serving key")
	clientCA := flag.String("client-ca-file", "", "CA of the API server's kubelet client certificate")
	pods := flag.String("pods-dir", "", "the pod runner's RUN/pods")
	flag.Parse()
	if *pods == "" || *cert == "" || *key == "" {
		log.Fatal("--pods-dir, --tls-cert-file and --tls-private-key-file are required")
	}
	a := &agent{podsDir: *pods}
	if path, err := exec.LookPath("nsenter"); err == nil {
		a.nsenter = path
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if *clientCA != "" {
		pool, err := loadPool(*clientCA)
		if err != nil {
			log.Fatal(err)
		}
		tlsConfig.ClientCAs = pool
		tlsConfig.ClientAuth = tls.RequireAndVerifyClientCert
	}
	server := &http.Server{Addr: *addr, Handler: a.routes(), TLSConfig: tlsConfig, ReadHeaderTimeout: 30 * time.Second}
	log.Printf("node agent serving the kubelet API on https://%s for %s", *addr, *pods)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
