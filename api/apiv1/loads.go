package apiv1

import "time"

// The internal wire between each /fn/ replica and the autoscaler (never served to users): a replica
// serves LoadsPath and PokesPath on its internal listener, and the autoscaler, which runs on the
// controllers' leader, reads them.
const (
	// LoadsPath answers GET with Loads: what this replica's /fn/ serves and holds now.
	LoadsPath = "/loads"
	// PokesPath answers GET with Pokes as soon as a request of some function is held (a long
	// poll: the autoscaler is the one that connects, so a replica needs not know which controller
	// leads), or with no function once the wait ends; "wait" is a duration (default and maximum
	// 30 s).
	PokesPath = "/pokes"
)

// Loads is one /fn/ replica's load.
type Loads struct {
	Functions []FunctionLoad `json:"functions"`
}

// FunctionLoad is one function's load in one /fn/ replica.
type FunctionLoad struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// InFlight is the requests being served by the function's instances; Held those waiting for
	// an instance.
	InFlight int `json:"in_flight"`
	Held     int `json:"held"`
	// Instances are the instances this replica routes to.
	Instances []InstanceLoad `json:"instances,omitempty"`
}

// InstanceLoad is one instance's load in one /fn/ replica.
type InstanceLoad struct {
	ID       string `json:"id"`
	InFlight int    `json:"in_flight"`
	// LastActive is when this replica last started or finished a request on it (zero: never).
	LastActive time.Time `json:"last_active,omitzero"`
}

// Pokes names the functions that had requests held since the poll began.
type Pokes struct {
	Functions []FunctionRef `json:"functions"`
}

// FunctionRef names a function.
type FunctionRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}
