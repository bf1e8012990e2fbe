package options

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/sless-dev/sless/autoscale"
)

// Autoscale configures the scale decider both backends run (package autoscale).
type Autoscale struct {
	StableWindow time.Duration
	PanicWindow  time.Duration
}

// AddFlags declares the decider's flags on fs.
func (o *Autoscale) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.StableWindow, "autoscale-stable-window", autoscale.DefaultStableWindow, "the load is averaged over this window to decide each function's instances")
	fs.DurationVar(&o.PanicWindow, "autoscale-panic-window", autoscale.DefaultPanicWindow, "a load of twice the capacity over this window scales up at once")
}

// DeciderOptions are autoscale.New's options for what the flags say.
func (o *Autoscale) DeciderOptions() []autoscale.Option {
	return []autoscale.Option{autoscale.WithStableWindow(o.StableWindow), autoscale.WithPanicWindow(o.PanicWindow)}
}
