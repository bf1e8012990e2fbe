package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func main() {
	var passed, failed, skipped int
	var failures, skips []string
	badPkg := false
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // build errors and other non-JSON lines
			continue
		}
		switch e.Action {
		case "output":
			fmt.Print(e.Output)
		case "pass":
			if e.Test != "" {
				passed++
			}
		case "fail":
			if e.Test != "" {
				failed++
				failures = append(failures, e.Package+" "+e.Test)
			} else {
				badPkg = true
			}
		case "skip":
			if e.Test != "" {
				skipped++
				skips = append(skips, e.Package+" "+e.Test)
			}
		}
	}
	sort.Strings(failures)
	sort.Strings(skips)
	if len(skips) > 0 {
		fmt.Printf("\nskipped:\n  %s\n", strings.Join(skips, "\n  "))
	}
	if len(failures) > 0 {
		fmt.Printf("\nfailed:\n  %s\n", strings.Join(failures, "\n  "))
	}
	fmt.Printf("\n%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || badPkg {
		os.Exit(1)
	}
}
