//go:build race

package instance

// raceDetector: the tests run under the race detector (make test), where
// the simulator is five to ten times slower; make test-sim explores
// without it.
const raceDetector = true
