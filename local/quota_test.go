package local_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/internal/testenv"
)

const pySleeper = "import time\ndef handle(event):\n    time.sleep(float((event or {}).get('sleep', 0)) if isinstance(event, dict) else 0)\n    return {'ok': True}\n"

// sless up's per-tenant caps on the real platform: functions a namespace may hold, memory its
// running containers may have in all, and job and cron runs at once.
func TestTenantQuotas(t *testing.T) {
	podman := testenv.NewPodman(t)
	u := startUpWith(t, "--tenant-quota-functions", "3", "--tenant-quota-memory", "640Mi", "--tenant-quota-runs", "1")
	ctx := context.Background()
	ns := u.c.Namespace()
	t.Cleanup(func() {
		podman.Command(context.Background(), "rm", "-f", "-t", "1", "-a", "--filter", "label=sless.dev/namespace="+ns).Run()
	})
	containersOf := func(fn string) []string {
		out, _ := podman.Command(ctx, "ps", "--filter", "label=sless.dev/function="+fn, "--filter", "label=sless.dev/namespace="+ns,
			"--filter", "label=sless.dev/role=function", "--format", "{{.Names}}").Output()
		return strings.Fields(string(out))
	}

	// 128 + 256 MiB of the 640 run.
	if f := u.deploy(t, "sleeper", "python3.11", map[string]string{"handler.py": pySleeper}); f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("sleeper %+v", f.Status)
	}
	if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "big", Runtime: "python3.11", MemoryMB: 256}); err != nil {
		t.Fatal(err)
	}
	if f := u.deploy(t, "big", "python3.11", map[string]string{"handler.py": pySleeper}); f.Status.Phase != apiv1.PhaseReady {
		t.Fatalf("big %+v", f.Status)
	}

	t.Run("functions", func(t *testing.T) {
		if _, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "third", Runtime: "python3.11", MemoryMB: 512}); err != nil {
			t.Fatal(err)
		}
		_, err := u.c.CreateFunction(ctx, apiv1.Function{Name: "fourth", Runtime: "python3.11"})
		var ae *apiv1.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != apiv1.CodeQuotaExceeded || !strings.Contains(ae.Message, "--tenant-quota-functions") {
			t.Fatalf("a fourth function: %v", err)
		}
		if list, _ := u.c.ListFunctions(ctx); len(list) != 3 {
			t.Errorf("%d functions after the refused create", len(list))
		}
	})

	t.Run("memory", func(t *testing.T) {
		// 384 + 512 > 640: refused at start, with why in the status; the others keep running.
		f := u.deploy(t, "third", "python3.11", map[string]string{"handler.py": pySleeper})
		if f.Status.Phase != apiv1.PhaseFailed || !strings.Contains(f.Status.Message, "quota exceeded") || !strings.Contains(f.Status.Message, "384 MiB of the 640 MiB") {
			t.Fatalf("a function beyond the memory quota: %+v", f.Status)
		}
		if cs := containersOf("third"); len(cs) != 0 {
			t.Errorf("containers of the refused function: %v", cs)
		}
		if code, _ := u.get("/fn/" + ns + "/sleeper"); code != 200 {
			t.Errorf("sleeper after the refusal: %d", code)
		}
		// Smaller, it fits: 384 + 128.
		f.MemoryMB = 128
		if _, err := u.c.UpdateFunction(ctx, *f); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, func() bool {
			f, _ = u.c.GetFunction(ctx, "third")
			return f.Status.Phase == apiv1.PhaseReady && f.MemoryMB == 128 && f.Status.Message == ""
		}, "third at 128 MiB to run")
	})

	t.Run("runs", func(t *testing.T) {
		// 512 + 128 MiB: memory fits, but one run at a time.
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "slow", FunctionRef: "sleeper", EventJSON: `{"sleep": 10}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			j, _ := u.c.GetJob(ctx, "slow")
			return j != nil && j.Status.Phase == apiv1.JobRunning
		}, "slow to run")
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "next", FunctionRef: "sleeper", EventJSON: `{}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			j, _ := u.c.GetJob(ctx, "next")
			return j != nil && j.Status.Phase == apiv1.JobPending && strings.Contains(j.Status.Message, "waiting to start") &&
				strings.Contains(j.Status.Message, "--tenant-quota-runs")
		}, "next to wait for a free run")
		// A cron time that comes while the place is taken waits too.
		if _, err := u.c.CreateTrigger(ctx, apiv1.Trigger{Name: "minutely", Type: "cron", FunctionRef: "sleeper", Schedule: "* * * * *"}); err != nil {
			t.Fatal(err)
		}
		setClock(t, u, time.Now())
		due := time.Now().UTC().Truncate(time.Minute).Add(time.Minute)
		setClock(t, u, due.Add(time.Second))
		time.Sleep(2 * time.Second) // scheduler passes
		crons, _ := podman.Command(ctx, "ps", "-a", "--filter", "label=sless.dev/role=cron", "--filter", "label=sless.dev/namespace="+ns, "--format", "{{.Names}}").Output()
		if j, _ := u.c.GetJob(ctx, "slow"); j.Status.Phase != apiv1.JobRunning {
			t.Fatalf("slow ended before the cron time could be seen waiting: %+v", j.Status)
		} else if len(strings.TrimSpace(string(crons))) != 0 {
			t.Errorf("a cron run started beside the running job: %s", crons)
		}
		slow := waitJob(t, u, "slow", 1)
		next := waitJob(t, u, "next", 1)
		if slow.Status.Phase != apiv1.JobSucceeded || next.Status.Phase != apiv1.JobSucceeded {
			t.Fatalf("slow %+v next %+v", slow.Status, next.Status)
		}
		if next.Status.StartTime.Before(*slow.Status.CompletionTime) {
			t.Errorf("next started at %v, before slow ended at %v", next.Status.StartTime, slow.Status.CompletionTime)
		}
		waitFor(t, 30*time.Second, func() bool {
			inv, _ := u.c.Invocations(ctx, "sleeper")
			for _, i := range inv {
				if i.RequestID == "cron-minutely-"+strconv.FormatInt(due.Unix(), 10) && i.Status == 200 {
					return true
				}
			}
			return false
		}, "the waiting cron run to run once a place was free")
		if err := u.c.DeleteTrigger(ctx, "minutely"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("counted after a restart", func(t *testing.T) {
		// The containers outlive sless up; the next one counts them (their memory label) before
		// it starts anything: 512 MiB run, so a job of "big" (256) waits.
		dataDir, listen, regAddr := u.dataDir, u.Listen, u.RegAddr
		u.stop()
		u = &up{SlessUp: testenv.StartSlessUp(t, dataDir, listen, regAddr, "--tenant-quota-functions", "3", "--tenant-quota-memory", "640Mi", "--tenant-quota-runs", "1")}
		u.c, u.token, u.url, u.dataDir = u.Client, u.Token, u.URL, dataDir
		if _, err := u.c.CreateJob(ctx, apiv1.Job{Name: "heavy", FunctionRef: "big", EventJSON: `{}`, RunID: 1}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			j, _ := u.c.GetJob(ctx, "heavy")
			return j != nil && j.Status.Phase == apiv1.JobPending && strings.Contains(j.Status.Message, "512 MiB of the 640 MiB")
		}, "heavy to wait for memory")
		// Shrinking a function frees memory: heavy runs.
		f, err := u.c.GetFunction(ctx, "third")
		if err != nil {
			t.Fatal(err)
		}
		if err := u.c.DeleteFunction(ctx, f.Name); err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, u, "heavy", 1); j.Status.Phase != apiv1.JobSucceeded {
			t.Errorf("heavy after memory was freed: %+v", j.Status)
		}
	})
	u.stop()
}
