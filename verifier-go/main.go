// verify-bundle: checks a recon evidence bundle with no recon code.
//
//	go run . -keys verify-keys.json bundle.json [more.json ...]
//
// Prints one JSON verdict per bundle; exits 0 when all are VALID, 1 when one is INVALID,
// 3 when none is INVALID and one is UNVERIFIABLE, 2 when it could not run.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
)

func main() {
	keysPath := flag.String("keys", "", "the verify keys file (as `audit keys` prints it)")
	flag.Parse()
	if *keysPath == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: verify-bundle -keys KEYS.json BUNDLE.json...")
		os.Exit(2)
	}
	keys, err := LoadKeys(*keysPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keys:", err)
		os.Exit(2)
	}
	code := 0
	for _, path := range flag.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		verdict := VerifyBundle(data, keys)
		out, _ := json.Marshal(map[string]string{"file": path, "verdict": verdict.Verdict, "problem": verdict.Problem})
		fmt.Println(string(out))
		switch {
		case verdict.Verdict == "INVALID":
			code = 1
		case verdict.Verdict == "UNVERIFIABLE" && code == 0:
			code = 3
		}
	}
	os.Exit(code)
}
