module github.com/allot-dev/allot

go 1.26
