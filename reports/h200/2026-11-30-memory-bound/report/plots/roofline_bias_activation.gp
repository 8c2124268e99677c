# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_bias_activation.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_bias_activation.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_bias_activation.svg"
set title "roofline: bias_activation (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [0.187489:5.99995]
set yrange [6.52641e+11:1.02273e+14]
plot data . "roofline_bias_activation_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     4.26142e+12 * x with lines lw 2 title "DRAM copy ceiling (4.26 TB/s)"
