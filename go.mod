module github.com/lanesched/lanes

go 1.26
