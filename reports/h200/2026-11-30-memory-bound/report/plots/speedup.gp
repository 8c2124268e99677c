# Written by `shapetune report`. Render: gnuplot DIR/plots/speedup.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("speedup.gp")]
data = here . "../data/"
reset
set terminal svg size 900,700 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "speedup.svg"
set title "winner's speedup over the best library baseline"
set lmargin 22
set ylabel "speedup (x)"
set grid ytics
set style fill solid 0.6
set boxwidth 0.7
set xtics rotate by 45 right font ",8"
set xrange [-1:25]
set yrange [0:*]
plot data . "speedup.dat" using 1:2:xtic(3) with boxes notitle, 1 with lines dt 2 lc rgb "black" notitle
