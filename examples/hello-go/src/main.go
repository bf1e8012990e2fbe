package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if os.Getenv("JOB_MODE") == "1" {
		os.Exit(job())
	}
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "hello-go:", err)
		os.Exit(1)
	}
}

func serve() error {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		if name == "" {
			name = "world"
		}
		greeting := os.Getenv("GREETING")
		if greeting == "" {
			greeting = "hello"
		}
		exe, _ := os.Stat("/proc/self/exe")
		mode := ""
		if exe != nil {
			mode = exe.Mode().String()
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"message": greeting + ", " + name, "method": r.Method, "path": r.URL.Path,
			"runtime": "provided", "go": runtime.Version(), "uid": os.Getuid(), "euid": os.Geteuid(), "exe_mode": mode,
		})
	})
	srv := &http.Server{Addr: net.JoinHostPort(os.Getenv("HOST"), port), Handler: logged(mux),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return err
	}
	// SIGTERM: stop taking requests, finish those in flight (GRACE_SEC, as the platform says), exit 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		grace, _ := strconv.Atoi(os.Getenv("GRACE_SEC"))
		sctx, cancel := context.WithTimeout(context.Background(), time.Duration(max(grace, 1))*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// logged writes one JSON line per request to stdout, as the language runtimes do.
func logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &status{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		line, _ := json.Marshal(map[string]any{"time": start.UTC().Format(time.RFC3339Nano), "method": r.Method, "path": r.URL.Path,
			"status": sw.code, "duration_ms": time.Since(start).Milliseconds(), "request_id": r.Header.Get("X-Request-Id")})
		fmt.Println(string(line))
	})
}

type status struct {
	http.ResponseWriter
	code int
}

func (s *status) WriteHeader(code int) { s.code = code; s.ResponseWriter.WriteHeader(code) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// job runs once on EVENT_JSON: {"input":[numbers]} gives {"sum":…}; any other event is echoed.
func job() int {
	var event map[string]any
	if err := json.Unmarshal([]byte(os.Getenv("EVENT_JSON")), &event); err != nil {
		fmt.Fprintln(os.Stderr, "hello-go: EVENT_JSON is not a JSON object:", err)
		return 1
	}
	result := map[string]any{"event": event}
	if input, ok := event["input"].([]any); ok {
		sum := 0.0
		for _, v := range input {
			n, ok := v.(float64)
			if !ok {
				fmt.Fprintf(os.Stderr, "hello-go: input holds %v, not a number\n", v)
				return 1
			}
			sum += n
		}
		result = map[string]any{"sum": sum}
	}
	b, _ := json.Marshal(result)
	fmt.Println(string(b))
	if p := os.Getenv("TERMINATION_LOG"); p != "" {
		os.WriteFile(p, b, 0o644) // read-only elsewhere: stdout's last line is the result then
	}
	return 0
}
