//go:build !race

package instance

const raceDetector = false
