package runner

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/fnlog"
	"github.com/sless-dev/sless/objects"
)

// A function container's output goes to a file of its own under the data directory (podman's
// k8s-file driver, written by conmon), named for the container and the moment it was created:
// the file outlives `podman rm`, so an instance stopped by scale-down or a new version stays
// readable for fnlog.KeepStopped (CollectLogs), and a name reused by a later container does not
// mix their lines. conmon starts the file over when it passes logMaxSize.
const logMaxSize = "8mb"

// logPoll is how often a followed log looks for new lines.
const logPoll = 200 * time.Millisecond

// logListing is one read of a function's log directory. Every follower of the function looks
// whether its container still runs once per logPoll; they share one read per logPoll instead of
// listing the directory each (a function of 100 instances followed 16 times would otherwise list
// a directory of hundreds of files 8,000 times a second).
type logListing struct {
	at    time.Time
	files []logFile
	err   error
}

var _ objects.Logs = (*Runner)(nil)

func (r *Runner) logDir(ns, name string) string { return filepath.Join(r.dataDir, "logs", ns, name) }

// logFlags are the `podman run`/`create` flags that send container cname's output to its own file.
func (r *Runner) logFlags(ns, name, cname string) ([]string, error) {
	dir := r.logDir(ns, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, cname+"."+strconv.FormatInt(time.Now().UnixNano(), 10)+".log")
	return []string{"--log-driver", "k8s-file", "--log-opt", "path=" + path, "--log-opt", "max-size=" + logMaxSize}, nil
}

// logCapFlags cap a job or cron run's output at logMaxSize, as logFlags cap an instance's, in
// podman's own place for it: it is read (Attach) and removed with the container.
func logCapFlags() []string {
	return []string{"--log-driver", "k8s-file", "--log-opt", "max-size=" + logMaxSize}
}

// logFile is one container's log file: ID is the file name without ".log", container its name.
type logFile struct {
	id, container string
	created       int64
	mod           time.Time
	size          int64
}

func (r *Runner) logFiles(ns, name string) ([]logFile, error) {
	readDir := os.ReadDir
	if r.readDir != nil {
		readDir = r.readDir
	}
	entries, err := readDir(r.logDir(ns, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []logFile
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".log")
		i := strings.LastIndexByte(id, '.')
		if !ok || i < 0 || e.IsDir() {
			continue
		}
		created, err := strconv.ParseInt(id[i+1:], 10, 64)
		info, ierr := e.Info()
		if err != nil || ierr != nil {
			continue
		}
		out = append(out, logFile{id: id, container: id[:i], created: created, mod: info.ModTime(), size: info.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created < out[j].created })
	return out, nil
}

// live is the function's containers that run now (ready or starting), by name.
func (r *Runner) live(ns, name string) map[string]bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m := map[string]bool{}
	if p := r.pools[ns+"/"+name]; p != nil {
		for _, in := range p.ready {
			m[in.Name] = true
		}
		for n := range p.starting {
			m[n] = true
		}
	}
	return m
}

// sharedLogFiles is the function's log files as read at most logPoll ago (logListing).
func (r *Runner) sharedLogFiles(ns, name string) ([]logFile, error) {
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	key := ns + "/" + name
	r.listMu.Lock()
	defer r.listMu.Unlock() // held while listing: followers that tick together wait for one read
	if l, ok := r.listings[key]; ok && now.Sub(l.at) < logPoll && !now.Before(l.at) {
		return l.files, l.err
	}
	files, err := r.logFiles(ns, name)
	if r.listings == nil {
		r.listings = map[string]logListing{}
	}
	for k, l := range r.listings {
		if now.Sub(l.at) > time.Minute { // no longer followed
			delete(r.listings, k)
		}
	}
	r.listings[key] = logListing{at: now, files: files, err: err}
	return files, err
}

// LogInstances lists the function's containers with a log: those that run (each name's newest
// file) and those stopped within fnlog.KeepStopped.
func (r *Runner) LogInstances(_ context.Context, ns, name string) ([]objects.LogInstance, error) {
	files, err := r.logFiles(ns, name)
	if err != nil {
		return nil, err
	}
	return r.logInstances(ns, name, files), nil
}

func (r *Runner) logInstances(ns, name string, files []logFile) []objects.LogInstance {
	live := r.live(ns, name)
	newest := map[string]string{}
	for _, f := range files {
		newest[f.container] = f.id
	}
	var out []objects.LogInstance
	for _, f := range files {
		running := live[f.container] && newest[f.container] == f.id
		if !running && (time.Since(f.mod) > fnlog.KeepStopped || f.size == 0) {
			continue // gone an hour ago, or never started (a spare's file, made at its create)
		}
		out = append(out, objects.LogInstance{ID: f.id, Stopped: !running})
	}
	return out
}

// stillRunning reports whether log id is a running container's.
func (r *Runner) stillRunning(ns, name, id string) bool {
	files, err := r.sharedLogFiles(ns, name)
	if err != nil {
		return false
	}
	for _, in := range r.logInstances(ns, name, files) {
		if in.ID == id {
			return !in.Stopped
		}
	}
	return false
}

// ReadLog emits the lines of one container's log file (objects.Logs).
func (r *Runner) ReadLog(ctx context.Context, ns, name string, inst objects.LogInstance, q objects.LogQuery, emit func(apiv1.LogLine) error) error {
	if strings.ContainsAny(inst.ID, `/\`) || inst.ID == "" || inst.ID[0] == '.' {
		return fmt.Errorf("no log %q", inst.ID)
	}
	container := inst.ID[:max(0, strings.LastIndexByte(inst.ID, '.'))]
	path := filepath.Join(r.logDir(ns, name), inst.ID+".log")
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { f.Close() }()
	p := &k8sFileParser{instance: container}
	var lines []apiv1.LogLine
	collect := func(l apiv1.LogLine) error {
		if !q.Since.IsZero() && l.Time.Before(q.Since) {
			return nil
		}
		lines = append(lines, l)
		if q.Tail >= 0 && len(lines) > 2*q.Tail+64 {
			lines = append(lines[:0], lines[len(lines)-q.Tail:]...)
		}
		return nil
	}
	br := bufio.NewReaderSize(f, 64<<10)
	if err := p.read(br, collect); err != nil {
		return err
	}
	if inst.Stopped {
		p.flush(collect) // a last line the container never finished
	}
	for _, l := range fnlog.Select(lines, time.Time{}, q.Tail) {
		if err := emit(l); err != nil {
			return err
		}
	}
	if !q.Follow {
		return nil
	}
	send := func(l apiv1.LogLine) error {
		if !q.Since.IsZero() && l.Time.Before(q.Since) {
			return nil
		}
		return emit(l)
	}
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		running := r.stillRunning(ns, name, inst.ID)
		// conmon starts a full file over as a new file under the same name: read that one.
		if st, err := os.Stat(path); err == nil {
			if cur, err := f.Stat(); err == nil && !os.SameFile(st, cur) {
				if err := p.read(br, send); err != nil {
					return err
				}
				nf, err := os.Open(path)
				if err != nil {
					return nil
				}
				f.Close()
				f = nf
				br.Reset(f)
			}
		}
		if err := p.read(br, send); err != nil {
			return err
		}
		if !running {
			return p.flush(send) // gone: what it wrote is out
		}
	}
}

// k8sFileParser reads podman's k8s-file format: "<RFC 3339 nano> <stdout|stderr> <F|P> <text>",
// P marking a part of a longer line that the next records continue.
type k8sFileParser struct {
	instance string
	partial  map[string]*apiv1.LogLine // by stream
	rest     []byte                    // a record not yet ended by a newline
}

// read parses the records available from br (to EOF); an unfinished one waits for the next read.
func (p *k8sFileParser) read(br *bufio.Reader, emit func(apiv1.LogLine) error) error {
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			p.rest = append(p.rest, chunk...)
			continue
		}
		if err == io.EOF {
			p.rest = append(p.rest, chunk...)
			return nil
		}
		if err != nil {
			return err
		}
		rec := chunk
		if len(p.rest) > 0 {
			rec = append(p.rest, chunk...)
			p.rest = nil
		}
		if err := p.record(bytes.TrimRight(rec, "\n"), emit); err != nil {
			return err
		}
	}
}

func (p *k8sFileParser) record(rec []byte, emit func(apiv1.LogLine) error) error {
	ts, rest, ok1 := bytes.Cut(rec, []byte(" "))
	stream, rest, ok2 := bytes.Cut(rest, []byte(" "))
	tag, text, ok3 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || !ok3 {
		if ok2 && len(tag) > 0 && !ok3 { // an empty line: "<ts> stdout F"
			text = nil
		} else {
			return nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return nil
	}
	s := string(stream)
	if p.partial == nil {
		p.partial = map[string]*apiv1.LogLine{}
	}
	l := p.partial[s]
	if l == nil {
		l = &apiv1.LogLine{Time: t.UTC(), Instance: p.instance, Stream: s}
		p.partial[s] = l
	}
	if len(l.Line) <= apiv1.MaxLogLine {
		l.Line += string(text)
	}
	if string(tag) == "P" {
		return nil
	}
	delete(p.partial, s)
	l.Line = fnlog.Clip(l.Line)
	return emit(*l)
}

// flush emits the parts of lines a stopped container never finished.
func (p *k8sFileParser) flush(emit func(apiv1.LogLine) error) error {
	for s, l := range p.partial {
		delete(p.partial, s)
		l.Line = fnlog.Clip(l.Line)
		if err := emit(*l); err != nil {
			return err
		}
	}
	return nil
}

// CollectLogs deletes the log files of containers stopped more than fnlog.KeepStopped ago, of
// every function, and the directories of functions left with none.
func (r *Runner) CollectLogs() {
	root := filepath.Join(r.dataDir, "logs")
	nss, _ := os.ReadDir(root)
	for _, n := range nss {
		fns, _ := os.ReadDir(filepath.Join(root, n.Name()))
		for _, fn := range fns {
			insts, err := r.LogInstances(context.Background(), n.Name(), fn.Name())
			if err != nil {
				continue
			}
			keep := map[string]bool{}
			for _, in := range insts {
				keep[in.ID+".log"] = true
			}
			dir := filepath.Join(root, n.Name(), fn.Name())
			files, _ := os.ReadDir(dir)
			for _, f := range files {
				// A spare's file is made at its create: only files of a while ago go.
				if info, err := f.Info(); err == nil && !keep[f.Name()] && time.Since(info.ModTime()) > fnlog.KeepStopped {
					os.Remove(filepath.Join(dir, f.Name()))
				}
			}
		}
	}
	// The directories stay: one removed while a container is being created would fail its start
	// (ForgetLogs removes a deleted function's).
}

// stoppedLog marks the newest log file of container name as stopped now: the hour it stays
// readable counts from its stop, not from its last line.
func (r *Runner) stoppedLog(name string) {
	files, _ := filepath.Glob(filepath.Join(r.dataDir, "logs", "*", "*", name+".*.log"))
	newest, at := "", int64(-1)
	for _, f := range files {
		id := strings.TrimSuffix(filepath.Base(f), ".log")
		if created, err := strconv.ParseInt(id[strings.LastIndexByte(id, '.')+1:], 10, 64); err == nil && created > at {
			newest, at = f, created
		}
	}
	if newest != "" {
		now := time.Now()
		os.Chtimes(newest, now, now)
	}
}

// ForgetLogs removes a deleted function's logs.
func (r *Runner) ForgetLogs(ns, name string) error {
	return os.RemoveAll(r.logDir(ns, name))
}
