module github.com/roster-go/roster

go 1.26

require go.uber.org/goleak v1.3.0 // indirect
