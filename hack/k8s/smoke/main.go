package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "get" {
		os.Exit(get(os.Args[2:]))
	}
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})
	fmt.Println("serving on :8080")
	if err := http.ListenAndServe(":8080", nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(urls []string) int {
	client := &http.Client{Timeout: 3 * time.Second}
	for _, u := range urls {
		start := time.Now()
		for {
			body, err := fetch(client, u)
			if err == nil {
				fmt.Printf("GET %s -> 200 in %v: %s\n", u, time.Since(start).Round(time.Millisecond), strings.TrimSpace(body))
				break
			}
			if time.Since(start) > 20*time.Second {
				fmt.Printf("GET %s failed: %v\n", u, err)
				return 1
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return 0
}

func fetch(client *http.Client, u string) (string, error) {
	resp, err := client.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(b), nil
}
