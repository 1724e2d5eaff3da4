/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command instance is the instance manager of MyDatabase pods
// (internal/instance). It ships in the operator's image; the pod's init
// container copies it into an emptyDir shared with the database container,
// so that the official postgres image runs it as PID 1 unchanged.
//
//	instance install DEST   copy this binary to DEST (the init container)
//	instance run            prepare the data directory, run PostgreSQL (the database container)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"example.com/myoperator/internal/instance"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "install":
		if len(os.Args) != 3 {
			usage()
		}
		if err := install(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "instance install: %v\n", err)
			os.Exit(1)
		}
	case "run":
		c, err := instance.ConfigFromEnv()
		log := instance.NewLogger(c.PodName)
		if err != nil {
			log("%v", err)
			os.Exit(1)
		}
		code, err := instance.Run(context.Background(), c, log)
		if err != nil {
			log("%v", err)
		}
		os.Exit(code)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: instance install DEST | instance run")
	os.Exit(2)
}

// install copies this executable to dest, whole or not at all.
func install(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.CreateTemp(filepath.Dir(dest), ".instance-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(out.Name()) }()
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Chmod(0o555); err != nil {
		_ = out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(out.Name(), dest)
}
