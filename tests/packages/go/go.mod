module deltaship.dev/vectors-check

go 1.23.0

require deltaship.dev/consumer/v2 v2.0.0
