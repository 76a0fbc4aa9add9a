package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // the json format of --logging-format
	"k8s.io/klog/v2"
)

// logFormats are the values of --logging-format, as Kubernetes components have them.
var logFormats = []string{"text", "json"}

// loggingFlags are serve's logging flags: --logging-format and -v.
type loggingFlags struct {
	format    string
	verbosity int
}

func (l *loggingFlags) register(fs *flag.FlagSet) {
	l.format = "text"
	fs.Func("logging-format", "log format: text (klog's) or json (one JSON object a line: ts, v, msg and the key/value pairs) [text]", func(v string) error {
		if !slices.Contains(logFormats, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(logFormats, ", "))
		}
		l.format = v
		return nil
	})
	fs.IntVar(&l.verbosity, "v", 0, "log verbosity")
}

// setup makes klog's logger, which client-go writes to, the format asked for on out (stderr in
// serve), through k8s.io/component-base's logging configuration like a Kubernetes component, and
// returns it for controller-runtime. It can be applied once per process.
func (l *loggingFlags) setup(out io.Writer) (logr.Logger, error) {
	c := logsapi.NewLoggingConfiguration()
	c.Format = l.format
	c.Verbosity = logsapi.VerbosityLevel(l.verbosity)
	if err := logsapi.ValidateAndApplyWithOptions(c, &logsapi.LoggingOptions{ErrorStream: out, InfoStream: out}, nil); err != nil {
		return logr.Logger{}, fmt.Errorf("--logging-format: %v", err)
	}
	jsonLogging = l.format == "json"
	return klog.Background(), nil
}

// jsonLogging is set once serve applied --logging-format=json to klog: its fatal error then goes
// through that logger.
var jsonLogging bool

// jsonRequested says whether args (serve's flags) ask for --logging-format=json, the last
// occurrence winning as with the flag package; it reads the flags before they are parsed, so that
// an error in another flag is written in the format asked for too.
func jsonRequested(args []string) bool {
	json := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "logging-format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			i++
			v = args[i]
		}
		json = v == "json"
	}
	return json
}

// logFatal writes serve's fatal error as one JSON object (klog's JSON logger: ts, caller, msg
// "command failed", err), as Kubernetes components write theirs, applying the JSON format first
// when serve stopped before it did (a bad flag). It reports false when the format cannot be
// applied: the caller then prints the usual line.
func logFatal(err error, out io.Writer) bool {
	if !jsonLogging {
		l := loggingFlags{format: "json"}
		if _, err := l.setup(out); err != nil {
			return false
		}
	}
	klog.Background().Error(err, "command failed")
	klog.Flush()
	return true
}
